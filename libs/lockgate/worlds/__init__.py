"""Deterministic simulated systems that adapters act on, each with a ledger of its effects."""
