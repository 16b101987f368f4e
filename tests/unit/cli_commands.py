"""The ``lockgate`` parser's commands, walked: what a test needs to try each one."""

from __future__ import annotations

import argparse


def commands(p: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command a person can type (``"review approve"``), and its parser."""
    found: dict[str, argparse.ArgumentParser] = {}
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {prefix.strip(): p}
    for action in subs:
        for name, child in action.choices.items():
            found.update(commands(child, f"{prefix}{name} "))
    return found


def minimal_argv(p: argparse.ArgumentParser) -> list[str]:
    """The fewest arguments ``p`` accepts: a made-up value for each required one."""
    argv: list[str] = []
    grouped = {id(a) for g in p._mutually_exclusive_groups for a in g._group_actions}
    for group in p._mutually_exclusive_groups:
        if group.required:
            argv += _given(group._group_actions[0])
    for action in p._actions:
        if id(action) in grouped:
            continue
        if not action.option_strings and action.nargs not in ("?", "*", argparse.REMAINDER):
            argv.append(_value(action))
        elif action.option_strings and action.required:
            argv += _given(action)
    return argv


def _given(action: argparse.Action) -> list[str]:
    flag = action.option_strings[0]
    return [flag] if action.nargs == 0 else [flag, _value(action)]


def _value(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    if action.type in (int, float):
        return "1"
    return "x"
