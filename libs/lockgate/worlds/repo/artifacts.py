"""What the repository world makes of a file: its summary, a patch to it, whether it is confidential.

Pure functions of the file's text: the world stores what they return, and the adapter
computes a patch's digest ahead of the world the same way.
"""

from __future__ import annotations

import difflib
from typing import Any

from lockgate.core.canonical import digest, digest_bytes

#: Longest summary parts, in characters.
TITLE_MAX_CHARS = 120
EXCERPT_MAX_LINES = 6
EXCERPT_MAX_CHARS = 600
HEADINGS_MAX = 12
#: Where confidential files live; a path under it is confidential wherever it is named from.
CONFIDENTIAL_PREFIX = "reports/confidential/"


def summarize(path: str, revision: str, text: str) -> dict[str, Any]:
    """The summary of a file: its title, headings and first lines, bounded and deterministic."""
    lines = [line.rstrip() for line in text.splitlines()]
    headings = [line.lstrip("#").strip()[:TITLE_MAX_CHARS] for line in lines if line.startswith("#")]
    body = [line for line in lines if line.strip() and not line.startswith("#")]
    title = headings[0] if headings else (body[0][:TITLE_MAX_CHARS] if body else path)
    excerpt = "\n".join(body[:EXCERPT_MAX_LINES])[:EXCERPT_MAX_CHARS]
    return {"path": path, "revision": revision, "title": title,
            "headings": headings[:HEADINGS_MAX], "excerpt": excerpt}


def patch_artifact(base_revision: str, path: str, old: str, new: str) -> dict[str, str]:
    """The patch turning ``old`` into ``new`` at ``path``, on ``base_revision``: content-addressed."""
    diff = "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"a/{path}", tofile=f"b/{path}",
    ))
    body = {"base_revision": base_revision, "path": path, "diff": diff,
            "new_blob": digest_bytes(new.encode())}
    return {**body, "digest": digest(body)}


def is_confidential(path: str) -> bool:
    """Whether a real (resolved) workspace path holds confidential material."""
    return path.startswith(CONFIDENTIAL_PREFIX)
