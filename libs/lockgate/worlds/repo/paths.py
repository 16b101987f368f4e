"""Workspace paths: one canonical spelling per file, and every way out of the workspace refused.

Two pure steps, both run by the adapter's ``normalize`` before anything is read:

- ``canonical`` checks the text a model wrote. It refuses absolute paths (``/etc``,
  ``~/x``, ``C:\\x``, ``\\\\host``), any ``..`` segment however it is spelled (``../``,
  ``..\\``, ``%2e%2e/``, ``%252e%252e``, full-width dots), control characters and NUL
  bytes, and any other encoded or backslashed spelling; what remains is written once:
  no ``.`` segments, no repeated or trailing slashes (``./docs//report.md`` is
  ``docs/report.md``).
- ``resolve`` follows the revision's symlinks, as a checkout would, and refuses a path
  whose resolution leaves the workspace at any step (an absolute target, or a relative
  one that climbs above the root, through a symlinked directory too).

Each refusal is a ``PathRefused`` carrying its stable reason code.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from lockgate.core.errors import LockgateError

#: Longest path accepted, in UTF-8 bytes.
PATH_MAX_BYTES = 512
#: Symlinks followed while resolving one path before it is refused (loops end here).
SYMLINK_MAX_HOPS = 16
#: How the workspace root is spelled canonically.
ROOT = "."

INVALID = "argument.path.invalid"
ABSOLUTE = "argument.path.absolute"
TRAVERSAL = "argument.path.traversal"
SYMLINK_ESCAPE = "argument.path.symlink-escape"
NOT_FOUND = "argument.path.not-found"
NOT_A_FILE = "argument.path.not-a-file"

#: Every reason code this module produces.
REASONS: tuple[str, ...] = (INVALID, ABSOLUTE, TRAVERSAL, SYMLINK_ESCAPE, NOT_FOUND, NOT_A_FILE)

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")
_DRIVE = re.compile(r"^[A-Za-z]:")
#: Percent-decoding rounds tried when looking for a hidden ``..`` (double encoding and more).
_DECODE_ROUNDS = 4


class PathRefused(LockgateError):
    """A path the workspace does not serve; ``reason`` is the stable code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail, code=reason)
        self.reason = reason


@dataclass(frozen=True)
class Entry:
    """One entry of a revision's tree: a file (by blob digest) or a symlink (by target)."""

    kind: str  # "file" | "symlink"
    blob: str = ""
    target: str = ""


#: A revision's tree: canonical path -> entry. Directories are implied by their files.
Tree = Mapping[str, Entry]


def _spellings(raw: str) -> list[str]:
    """``raw`` as the systems a path may reach would read it: decoded, backslashes, NFKC."""
    seen = [raw]
    text = raw
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote(text)
        if decoded == text:
            break
        seen.append(decoded)
        text = decoded
    for spelling in list(seen):
        seen.append(spelling.replace("\\", "/"))
    seen.extend(unicodedata.normalize("NFKC", s) for s in list(seen))
    return seen


def _is_absolute(spelling: str) -> bool:
    return spelling.startswith(("/", "\\", "~")) or bool(_DRIVE.match(spelling))


def canonical(raw: object) -> str:
    """The one spelling of a workspace-relative path (``ROOT`` for the workspace itself).

    Raises:
        PathRefused: ``argument.path.invalid`` (not text, too long, control characters,
            encoded, backslashed or non-NFKC spellings), ``argument.path.absolute``,
            ``argument.path.traversal``.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise PathRefused(INVALID, "the path must be non-empty text")
    if len(raw.encode("utf-8", "surrogatepass")) > PATH_MAX_BYTES:
        raise PathRefused(INVALID, f"the path exceeds {PATH_MAX_BYTES} bytes")
    spellings = _spellings(raw)
    if any(_CONTROL.search(s) for s in spellings):
        raise PathRefused(INVALID, "the path holds a control character or NUL byte")
    if any(_is_absolute(s) for s in spellings):
        raise PathRefused(ABSOLUTE, "the path must be relative to the workspace")
    if any(".." in s.split("/") for s in spellings):
        raise PathRefused(TRAVERSAL, "the path climbs out of its directory")
    if _ENCODED.search(raw) or "\\" in raw or unicodedata.normalize("NFKC", raw) != raw:
        # Not a way out, but a second spelling of some name: give the plain path.
        raise PathRefused(INVALID, "the path must be written plainly (no encoding, no backslash)")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    return "/".join(parts) if parts else ROOT


def _split(path: str) -> list[str]:
    return [] if path == ROOT else path.split("/")


def _is_dir(tree: Tree, path: str) -> bool:
    prefix = "" if path == ROOT else path + "/"
    return any(name.startswith(prefix) for name in tree)


@dataclass(frozen=True)
class Resolved:
    """Where a path lands inside the workspace: its real path and what is there."""

    path: str
    kind: str  # "file" | "dir"
    blob: str = ""


def resolve(tree: Tree, path: str) -> Resolved:
    """Follow ``path`` (canonical) through the tree's symlinks, never out of the workspace.

    Raises:
        PathRefused: ``argument.path.symlink-escape`` (a symlink leads out, however
            deep), ``argument.path.not-found``, ``argument.path.invalid`` (a symlink loop).
    """
    pending = _split(path)
    done: list[str] = []
    hops = 0
    while pending:
        name = pending.pop(0)
        if name == "..":  # only ever from a symlink's target: a climb inside the tree
            if not done:
                raise PathRefused(SYMLINK_ESCAPE, f"{path}: a symlink leads out of the workspace")
            done.pop()
            continue
        if name in ("", "."):
            continue
        here = "/".join([*done, name])
        entry = tree.get(here)
        if entry is None or entry.kind != "symlink":
            if entry is None and not _is_dir(tree, here):
                raise PathRefused(NOT_FOUND, f"{path}: no such file at this revision")
            if entry is not None and pending:
                raise PathRefused(NOT_FOUND, f"{path}: {here} is a file, not a directory")
            done.append(name)
            continue
        hops += 1
        if hops > SYMLINK_MAX_HOPS:
            raise PathRefused(INVALID, f"{path}: too many symlinks (a loop?)")
        target = entry.target
        if _is_absolute(target):
            raise PathRefused(SYMLINK_ESCAPE, f"{path}: a symlink leads out of the workspace")
        # The target is relative to the symlink's directory: start again from there.
        pending = target.split("/") + pending
    real = "/".join(done) if done else ROOT
    entry = tree.get(real)
    if entry is not None:
        return Resolved(real, "file", entry.blob)
    return Resolved(real, "dir")


def resolve_file(tree: Tree, path: str) -> Resolved:
    """``resolve``, and the path must land on a file.

    Raises:
        PathRefused: as ``resolve``, and ``argument.path.not-a-file`` for a directory.
    """
    found = resolve(tree, path)
    if found.kind != "file":
        raise PathRefused(NOT_A_FILE, f"{path}: a directory, not a file")
    return found


def escapes(tree: Tree, path: str) -> bool:
    """Whether following ``path`` leaves the workspace (a checkout drops such symlinks)."""
    try:
        resolve(tree, path)
    except PathRefused as refused:
        return refused.reason != NOT_FOUND
    return False
