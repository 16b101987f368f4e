"""``lockgate policy validate | test``: policy authoring, on files only (``lockgate.authz.cli``).

It needs no broker and parses its own arguments, so the ``lockgate`` parser only lists it.
"""

from __future__ import annotations

from lockgate.cli.group import OwnArguments, Subparsers


def _register(sub: Subparsers) -> None:
    sub.add_parser("policy", help="validate a policy bundle or run its case tables", add_help=False)


def _policy(argv: list[str]) -> int:
    from lockgate.authz.cli import policy_main

    return policy_main(argv)


POLICY = OwnArguments("policy", _register, _policy)
