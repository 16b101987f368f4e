"""The role table as a nats-server ``accounts`` block: one account per trust boundary.

Users are grouped by their role's account; every import a role needs is matched by an export
of its source account that names exactly the importing accounts (``lockgate.operations.roles``
says why the accounts are drawn where they are).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from lockgate.contracts import subjects
from lockgate.operations.grants import JS_API, SERVICES_ACCOUNT, Import, Role

_SAFE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # printable ASCII without '"' and '\'


def _quote(value: str) -> str:
    if not _SAFE.fullmatch(value):
        raise ValueError(f"{value!r} must be printable ASCII without quotes or backslashes")
    return json.dumps(value)


def _allow(kind: str, items: Iterable[str]) -> list[str]:
    items = list(items)
    if not items:
        # nats-server reads an empty allow-list as no restriction at all (measured).
        raise ValueError(f"an empty {kind} allow-list would allow every subject")
    return [f"            {kind}: {{ allow: [", *(f"              {_quote(i)}" for i in items),
            "            ] }"]


def _responses_of(subject: str) -> Literal["single", "stream"]:
    """How many answers a request to an exported ``subject`` may get.

    A status request is answered by every replica of the process (each says how it is),
    so status subjects pass a stream of responses; any other request gets one answer.
    """
    return "stream" if subjects.is_status(subject) else "single"


@dataclass
class _Account:
    users: list[tuple[str, Role, str]] = field(default_factory=list)
    imports: dict[tuple[str, str, str, str], Import] = field(default_factory=dict)
    #: (kind, subject) → (response type, importing accounts)
    exports: dict[tuple[str, str], tuple[str, set[str]]] = field(default_factory=dict)


def _accounts(users: Mapping[str, tuple[Role, str]]) -> dict[str, _Account]:
    """Group users by account and derive every import and the matching export."""
    accounts: dict[str, _Account] = {SERVICES_ACCOUNT: _Account()}
    for user, (role, password) in users.items():
        accounts.setdefault(role.account, _Account()).users.append((user, role, password))
    for name, account in list(accounts.items()):
        for _, role, _ in account.users:
            for imp in role.imports:
                account.imports[(imp.kind, imp.subject, imp.local, imp.source)] = imp
                source = accounts.setdefault(imp.source, _Account())
                responses, importers = source.exports.setdefault(
                    (imp.kind, imp.subject), (imp.responses, set()))
                if responses != imp.responses:
                    raise ValueError(f"{imp.subject}: imported with two response types")
                importers.add(name)
            for subject in role.exports:
                # An adapter's requests and status, for the services (and, by their
                # export of lg.status.>, for operators).
                responses = _responses_of(subject)
                _, importers = account.exports.setdefault(("service", subject), (responses, set()))
                importers.add(SERVICES_ACCOUNT)
                back = Import(subject, subject, "service", responses, source=name)
                accounts[SERVICES_ACCOUNT].imports[("service", subject, subject, name)] = back
    return accounts


def render_accounts(users: Mapping[str, tuple[Role, str]]) -> str:
    """A nats-server ``accounts { ... }`` block for ``users``, one account per trust boundary.

    Every import an account's roles need is matched by an export of its source that
    names exactly the importing accounts.

    Args:
        users: user name → (its role, its password).
    """
    lines = [
        "# Rendered from lockgate.operations.roles: accounts per trust boundary, one user per",
        "# role, permissions exactly its row. Holds passwords: keep it private (mode 0600).",
        "accounts {",
    ]
    for name, account in _accounts(users).items():
        lines.append(f"  {name}: {{")
        if name == SERVICES_ACCOUNT:
            lines.append("    jetstream: enabled")
        lines.append("    users: [")
        for user, role, password in account.users:
            lines += [
                "      {",
                f"        # role: {role.name}; connect with inbox_prefix {role.inbox_prefix}"
                + (f", JetStream prefix {role.js_prefix}" if role.js_prefix != JS_API else ""),
                f"        user: {_quote(user)}",
                f"        password: {_quote(password)}",
                "        permissions: {",
                *_allow("publish", role.publish),
                *_allow("subscribe", role.subscribe),
            ]
            if role.allow_responses:
                lines.append("            allow_responses: true")
            lines += ["        }", "      }"]
        lines.append("    ]")
        if account.exports:
            lines.append("    exports: [")
            for (kind, subject), (responses, importers) in account.exports.items():
                extra = ", response_type: \"stream\"" if responses == "stream" else ""
                targets = ", ".join(_quote(a) for a in sorted(importers))
                lines.append(f"      {{{kind}: {_quote(subject)}, accounts: [{targets}]{extra}}}")
            lines.append("    ]")
        if account.imports:
            lines.append("    imports: [")
            for imp in account.imports.values():
                to = f", to: {_quote(imp.local)}" if imp.local != imp.subject else ""
                lines.append(
                    f"      {{{imp.kind}: {{account: {_quote(imp.source)}, "
                    f"subject: {_quote(imp.subject)}}}{to}}}"
                )
            lines.append("    ]")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
