"""How a capability's effect reads to a person: the review object, rendered deterministically.

A capability declares its ``Consequence``: sentences with placeholders over the
normalized request (``{resource.id}``, ``{args.title}``, ``{actor}``,
``{destination}``) and the arguments a reviewer must read verbatim. Rendering is a pure
function of the normalized request, so the same digest always reads the same, and
a changed byte that changes what a person would read changes the review.

Argument values are untrusted (a model wrote them): they never become part of a
sentence's grammar. A placeholder's value is quoted, cut to a bound, and stripped of
control characters; the arguments shown verbatim are returned apart, labelled, for
the reader to see as data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from lockgate.core.canonical import canonical_json

#: The longest a placeholder's value is shown inside a sentence.
VALUE_MAX_CHARS = 80
#: The longest an argument is shown verbatim.
SHOWN_MAX_CHARS = 2000

_PLACEHOLDER = re.compile(r"\{(resource|args)\.([A-Za-z0-9_]+)\}|\{(actor|destination|tool)\}")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


class Consequence(msgspec.Struct, frozen=True, kw_only=True):
    """How one capability's effect reads, declared with its contract.

    ``action``: what will happen, to what (``Add a note to case {resource.id}``).
    ``visible_to``: who will see it (``everyone with access to case {resource.id}``).
    ``shows``: the model-written arguments a reviewer must read in full (``note``).
    """

    action: str
    visible_to: str = ""
    shows: tuple[str, ...] = ()


class Reading(msgspec.Struct, frozen=True, kw_only=True):
    """A consequence as rendered for one normalized request."""

    action: str
    visible_to: str
    shown: dict[str, str]
    """Arguments shown verbatim (untrusted text: display it as data, never as markup)."""

    @property
    def summary(self) -> str:
        """One line: the action, and who sees it."""
        return f"{self.action}; visible to {self.visible_to}" if self.visible_to else self.action


def clean(text: str, limit: int) -> str:
    """``text`` without control or direction-override characters, cut to ``limit``."""
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(value: Any) -> str:
    shown = value if isinstance(value, str) else canonical_json(value).decode()
    return clean(shown, VALUE_MAX_CHARS)


def render(consequence: Consequence | None, *, tool: str, actor: str, destination: str,
           arguments: Mapping[str, Any], resource: Mapping[str, str]) -> Reading:
    """Render ``consequence`` for one normalized request (a generic reading when ``None``)."""
    if consequence is None:
        consequence = Consequence(
            action="{actor} asks to {tool} on {destination}",
            shows=tuple(sorted(arguments)),
        )

    def fill(template: str) -> str:
        def one(match: re.Match[str]) -> str:
            scope, key, plain = match.group(1), match.group(2), match.group(3)
            if plain is not None:
                value = {"actor": actor, "destination": destination, "tool": tool}[plain]
                return _value(value)
            source = resource if scope == "resource" else arguments
            if key not in source:
                return "(unknown)"
            # The resource comes from the run's context; an argument from the model.
            return _value(source[key]) if scope == "resource" else f"“{_value(source[key])}”"

        return _PLACEHOLDER.sub(one, template)

    shown = {name: clean(_value_full(arguments[name]), SHOWN_MAX_CHARS)
             for name in consequence.shows if name in arguments}
    return Reading(action=fill(consequence.action), visible_to=fill(consequence.visible_to),
                   shown=shown)


def _value_full(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value).decode()
