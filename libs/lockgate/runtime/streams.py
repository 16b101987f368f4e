"""The streams and key-value buckets Lockgate keeps on the broker, by name.

Their configuration is ``lockgate.runtime.topology``'s; the specs
(``lockgate.runtime.specs``) name them for what each process reads, writes and consumes.
"""

from __future__ import annotations

CANDIDATES = "LG_CANDIDATES"
EXEC = "LG_EXEC"
REPORTS = "LG_REPORTS"
RESPONSES = "LG_RESPONSES"
#: Runs' leases: one message per run, its TTL the lease; the server marks a lease that ran out.
LEASES = "LG_LEASES"
EVENTS = "LG_EVENTS"
RUNS_BUCKET = "LG_RUNS"
CATALOGUES_BUCKET = "LG_CATALOGUES"
CAPABILITIES_BUCKET = "LG_CAPABILITIES"
#: Per-resource locks that serialize effects whose contracts ask for it (entries expire,
#: so a lock left by a crashed executor frees itself).
LOCKS_BUCKET = "LG_LOCKS"
#: Denials of one consequence per run, for policy's progress checkpoint.
PROGRESS_BUCKET = "LG_PROGRESS"
#: Budget counters (one key per budget, scope and window); old windows expire.
BUDGETS_BUCKET = "LG_BUDGETS"
#: The shadow bundle an operator runs beside the active one, and the log of bundle changes.
POLICY_BUCKET = "LG_POLICY"
#: Changes of the bundles the log keeps.
POLICY_CHANGES_KEPT = 64
#: The MCP adapter's records: server identities, discovery snapshots, mappings, reviews
#: (``lockgate.mcp.records``), append-only.
MCP = "LG_MCP"
