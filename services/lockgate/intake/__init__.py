"""Intake: runs, turns and candidates from agent runtimes; model-facing responses back."""
