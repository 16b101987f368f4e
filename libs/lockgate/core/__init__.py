"""Concepts every Lockgate component shares: errors, identities, canonical digests."""
