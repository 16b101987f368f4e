"""Tiny child processes for the supervisor's integration test (run as ``python -m fakes.<name>``)."""
