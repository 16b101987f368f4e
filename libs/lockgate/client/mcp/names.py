"""MCP tool names for a turn's capabilities, and the way back, through that turn only.

MCP tool names are ``[A-Za-z0-9._-]{1,128}`` (the 2025-11-25 specification's tool-name
rule, ``mcp.shared.tool_name_validation``). Capability names are lower-case dotted
words, so every one is a valid MCP name and is offered as is; anything else (a name the
registry may allow later) is spelled into the rule with a digest suffix, and the front
door's own tools keep their names: no capability can shadow them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

#: The specification's rule for a tool name.
MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9._-]")
_SUFFIX_CHARS = 9  # "-" and eight hex digits


def is_mcp_tool_name(name: str) -> bool:
    """True when ``name`` is a valid MCP tool name."""
    return bool(MCP_TOOL_NAME.fullmatch(name))


def _spelled(capability: str) -> str:
    """``capability`` spelled into the MCP rule, told apart from others by a digest of the original."""
    digest = hashlib.sha256(capability.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    stem = _NOT_ALLOWED.sub("_", capability)[: 128 - _SUFFIX_CHARS] or "tool"
    return f"{stem}-{digest}"


@dataclass(frozen=True)
class ToolNames:
    """One turn's names: MCP name to capability and back."""

    to_capability: dict[str, str]
    to_mcp: dict[str, str]

    @classmethod
    def of(cls, capabilities: Iterable[str], reserved: Iterable[str] = ()) -> ToolNames:
        """The names of a turn offering ``capabilities``; ``reserved`` names are the front door's own."""
        taken = set(reserved)
        to_capability: dict[str, str] = {}
        to_mcp: dict[str, str] = {}
        for capability in capabilities:
            name = capability if is_mcp_tool_name(capability) and capability not in taken else _spelled(capability)
            while name in taken:  # a digest collision, or a capability named like a spelling
                name = _spelled(name)
            taken.add(name)
            to_capability[name] = capability
            to_mcp[capability] = name
        return cls(to_capability, to_mcp)

    def capability(self, mcp_name: str) -> str:
        """The capability an MCP name stands for in this turn; a name it did not offer, as sent.

        A name the turn did not list still goes to Lockgate, which records it
        (``tool.not-offered`` or ``tool.unknown``) and refuses it: nothing is guessed here.
        """
        return self.to_capability.get(mcp_name, mcp_name)


NO_NAMES = ToolNames({}, {})
