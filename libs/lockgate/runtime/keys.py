"""Secrets a Lockgate process keeps on disk: created once, read by every later start."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from lockgate.core.errors import LockgateError
from lockgate.runtime.settings import Settings

#: Length of a generated key; a key read from a file must be at least this long.
KEY_BYTES = 32


class KeyFileError(LockgateError):
    """A key file that cannot be read or created, or that is too short to trust."""


def report_key_path(settings: Settings) -> Path:
    """Where the executor's report-token key lives."""
    return settings.report_key_file or settings.var_dir / "secrets" / "report.key"


def report_key(settings: Settings) -> bytes:
    """The executor's secret for report tokens, created with 32 random bytes if absent.

    Raises:
        KeyFileError: the file cannot be read or created, or holds fewer than 32 bytes.
    """
    return key_at(report_key_path(settings), chosen=settings.report_key_file is not None)


def key_at(path: Path, *, chosen: bool = False, what: str = "report key") -> bytes:
    """The secret in ``path``, created with 32 random bytes if absent.

    Race-safe between replicas starting at once: the key is written to a file of its own
    (``O_CREAT | O_EXCL``, mode 0600) and hard-linked into place, which fails when another
    process got there first; then the winner's (complete) key is read. A default
    directory (``chosen`` false) is made 0700.

    Raises:
        KeyFileError: the file cannot be read or created, or holds fewer than 32 bytes.
    """
    try:
        return _read(path, what)
    except FileNotFoundError:
        pass
    try:
        _make_private_dir(path.parent, default=not chosen)
        return _create(path, what)
    except OSError as exc:
        raise KeyFileError(f"cannot create the {what} {path}: {exc}",
                           code="keys.unavailable") from exc


def _read(path: Path, what: str) -> bytes:
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise KeyFileError(f"cannot read the {what} {path}: {exc}", code="keys.unavailable") from exc
    if len(key) < KEY_BYTES:
        raise KeyFileError(f"the {what} {path} holds {len(key)} bytes, fewer than {KEY_BYTES}",
                           code="keys.too-short")
    return key


def _make_private_dir(directory: Path, *, default: bool) -> None:
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        default = True  # made here: nobody else's directory to respect
    if default:
        directory.chmod(0o700)


def _create(path: Path, what: str) -> bytes:
    staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(KEY_BYTES))
            out.flush()
            os.fsync(out.fileno())
        # Atomic, and refuses to replace a key another process made (then that one is read).
        with contextlib.suppress(FileExistsError):
            os.link(staged, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
    return _read(path, what)
