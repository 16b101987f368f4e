"""Policy: Cedar decisions on current facts from the adapter."""
