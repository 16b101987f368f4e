"""Reconciler: settles outcomes that may or may not have happened, by asking the world."""
