"""What crosses process boundaries: capability contracts, wire messages, model-facing responses."""
