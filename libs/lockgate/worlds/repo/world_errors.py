"""The repository world's refusals, each with the stable reason code it is recorded under."""

from __future__ import annotations

from lockgate.worlds.storage import WorldError


class RepoWorldError(WorldError):
    """Root of the repository world's refusals; ``reason`` is the stable code."""

    reason = "repo.error"


class InvalidCredential(RepoWorldError):
    """The caller did not present the world's credential."""

    reason = "repo.credential-invalid"


class RepoNotFound(RepoWorldError):
    """No repository has this id."""

    reason = "repo.not-found"


class TenantMismatch(RepoWorldError):
    """The repository belongs to another tenant."""

    reason = "repo.tenant-mismatch"


class NotAMember(RepoWorldError):
    """The actor is not a member of the repository."""

    reason = "repo.not-a-member"


class RevisionUnknown(RepoWorldError):
    """No revision has this id."""

    reason = "repo.revision-unknown"


class RevisionStale(RepoWorldError):
    """The revision is no longer served (or is no longer the head, for a patch's base)."""

    reason = "repo.revision-stale"


class PathNotFound(RepoWorldError):
    """No file has this path at the revision."""

    reason = "repo.path-not-found"


class ArtifactNotFound(RepoWorldError):
    """No artifact of the tenant has this digest."""

    reason = "repo.artifact-not-found"


class PostTooLate(RepoWorldError):
    """The post reached the board after the latest moment it could take effect."""

    reason = "repo.post-too-late"


#: Every reason code the world can raise, for the test that lists them.
REASONS: tuple[str, ...] = tuple(
    cls.reason
    for cls in (InvalidCredential, RepoNotFound, TenantMismatch, NotAMember, RevisionUnknown,
                RevisionStale, PathNotFound, ArtifactNotFound, PostTooLate)
)
