"""Lockgate where agents already live: one module per agent framework, each an optional extra.

``lockgate.integrations.governed`` is what they share: a run whose tool calls Lockgate
decides (``GovernedRun``) and what became of each call (``Outcome``). Each framework's
module imports its framework; the core install imports none of them.
"""

from lockgate.integrations.governed import GovernedRun, Outcome, call_id_for

__all__ = ["GovernedRun", "Outcome", "call_id_for"]
