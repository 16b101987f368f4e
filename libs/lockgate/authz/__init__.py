"""Policy evaluation with Cedar: default deny, forbid overrides permit, errors never allow.

Two questions per request: may this happen at all (``Action::"<capability>"``), and
may it happen without a human (``Action::"<capability>::unattended"``). Together they
give allow, require_approval or deny. Policy ids (``@id``) are the reason codes a
forbid stands for, so a denial says which rule decided it.
"""

from lockgate.authz.engine import (
    AuthzRequest,
    BundleError,
    Decision,
    PolicyBundle,
    evaluate,
)

__all__ = ["AuthzRequest", "BundleError", "Decision", "PolicyBundle", "evaluate"]
