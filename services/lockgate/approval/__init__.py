"""Approval: immutable reviews bound to the exact consequence, decided by authenticated reviewers."""
