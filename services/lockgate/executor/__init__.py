"""Executor: the final gate, dispatch of authorized attempts, and attempt outcomes."""
