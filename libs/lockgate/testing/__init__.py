"""Test support shared by Lockgate's own suites and by adapter authors' suites."""
