"""The root of Lockgate's exceptions and the retryable/permanent split consumers act on."""

from __future__ import annotations


class LockgateError(Exception):
    """Root of every error Lockgate raises on purpose.

    ``retryable`` tells a consumer what to do with the message that caused it:
    retryable errors nak with a delay, the others end the message with a recorded
    reason.
    """

    retryable: bool = False

    def __init__(self, message: str, *, code: str = "lockgate.error") -> None:
        super().__init__(message)
        self.code = code


class TransientError(LockgateError):
    """A dependency (broker, adapter, key-value bucket) did not answer in time."""

    retryable = True
