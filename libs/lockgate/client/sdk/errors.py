"""The SDK's errors: one root (``ClientError``), each subclass with its stable code."""

from __future__ import annotations

from lockgate.contracts.messages import NotResolved
from lockgate.core.errors import LockgateError


class ClientError(LockgateError):
    """Root of the SDK's errors."""


class Refused(ClientError):
    """Lockgate refused a request (``code`` says why)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code, code=code)


class OutcomeSettled(Refused):
    """An operator's resolution was not recorded: the outcome was settled first.

    ``answer`` says by what: the event (``Reconciled`` or ``EffectCompleted``), its
    finding and resolution, who recorded it, when, and its receipt.
    """

    def __init__(self, answer: NotResolved) -> None:
        super().__init__(answer.error, answer.detail)
        self.answer = answer


class Unauthorized(ClientError):
    """The broker refused the credentials: a user it does not know, a wrong password, or none
    where it requires one (code ``lockgate.unauthorized``)."""


class PermissionDenied(ClientError):
    """The broker refused this connection's user a subject (code ``lockgate.permission-denied``).

    ``subject`` is the one refused. Asking again cannot help: the user's permissions say no.
    """

    def __init__(self, message: str, *, subject: str) -> None:
        super().__init__(message, code="lockgate.permission-denied")
        self.subject = subject


class UnknownCandidate(Refused):
    """No candidate of this run has that id (code ``candidate.unknown``)."""

    def __init__(self, detail: str) -> None:
        super().__init__("candidate.unknown", detail)


class CandidateTooLarge(ClientError):
    """The candidate is larger than Lockgate accepts in one message (code ``candidate.too-large``)."""


class InvalidCandidate(ClientError):
    """The candidate cannot be sent as JSON text at all (code ``candidate.malformed``).

    A Python string holding a lone surrogate, say, or a provider item nested deeper than
    any encoder goes: nothing was published.
    """



class ResponseTimeout(ClientError):
    """No model-facing response arrived in time; the candidate may still be in flight."""

    retryable = True

