"""The house's size bars, as a ratchet: no module over 600 lines, no function over 80.

Modules and functions that are over a bar today are listed below with their size now: one
may shrink, never grow, and leaves the list once it is under its bar (a stale entry
fails, so the list only gets shorter). Anything new over a bar fails at once. Tests are not
held to the bars.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Where the product's code lives (tests and the benchmark are not held to the bars).
ROOTS = ("libs", "services")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

#: Modules over the bar (and their length): none today.
MODULES_OVER: dict[str, int] = {}

#: Functions over the bar (``module:qualified.name``), and their length: none today.
FUNCTIONS_OVER: dict[str, int] = {}


def _modules() -> list[Path]:
    return sorted(path for root in ROOTS for path in (REPO / root).rglob("*.py")
                  if "node_modules" not in path.parts)


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def module_lengths() -> dict[str, int]:
    """Every product module's length in lines."""
    return {_name(path): len(path.read_text(encoding="utf-8").splitlines()) for path in _modules()}


def function_lengths() -> dict[str, int]:
    """Every product function's length in lines (decorators excluded), by ``module:qualified.name``."""
    lengths: dict[str, int] = {}
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        _walk(tree, _name(path), "", lengths)
    return lengths


def _walk(node: ast.AST, module: str, prefix: str, into: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                end = child.end_lineno if child.end_lineno is not None else child.lineno
                into[f"{module}:{name}"] = end - child.lineno + 1
            _walk(child, module, f"{name}.", into)
        else:
            _walk(child, module, prefix, into)


def _over(lengths: dict[str, int], bar: int, listed: dict[str, int]) -> list[str]:
    problems = []
    for name, length in sorted(lengths.items()):
        allowed = listed.get(name)
        if length > bar and allowed is None:
            problems.append(f"{name}: {length} lines, over the bar of {bar}")
        elif allowed is not None and length > allowed:
            problems.append(f"{name}: {length} lines, grown past the {allowed} it is listed with")
    for name, allowed in sorted(listed.items()):
        now = lengths.get(name)
        if now is None or now <= bar:
            problems.append(f"{name}: listed at {allowed} lines but now {now or 'gone'}; "
                            "take it off the list")
        elif now < allowed:
            problems.append(f"{name}: listed at {allowed} lines but now {now}; list it at {now}")
    return problems


def test_no_module_is_over_600_lines_but_the_listed_ones_which_only_shrink() -> None:
    assert _over(module_lengths(), MAX_MODULE_LINES, MODULES_OVER) == []


def test_no_function_is_over_80_lines_but_the_listed_ones_which_only_shrink() -> None:
    assert _over(function_lengths(), MAX_FUNCTION_LINES, FUNCTIONS_OVER) == []


def test_the_ratchet_sees_a_new_long_function_and_a_stale_entry() -> None:
    assert _over({"m.py:f": 81}, 80, {}) == ["m.py:f: 81 lines, over the bar of 80"]
    assert _over({"m.py:f": 90}, 80, {"m.py:f": 85}) == [
        "m.py:f: 90 lines, grown past the 85 it is listed with"]
    assert _over({"m.py:f": 70}, 80, {"m.py:f": 85}) == [
        "m.py:f: listed at 85 lines but now 70; take it off the list"]
    assert _over({}, 80, {"m.py:f": 85}) == ["m.py:f: listed at 85 lines but now gone; take it off the list"]
