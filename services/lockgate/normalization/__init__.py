"""Normalization: canonical arguments, the exact resource, and the digest that binds them."""
