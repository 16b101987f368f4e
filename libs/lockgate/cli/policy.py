"""``lockgate policy``: validate a policy bundle and run case tables against it.

``lockgate policy validate DIR`` loads ``DIR`` as the policy service does and lists its
policies; ``lockgate policy test DIR CASES.yaml …`` checks each case table (see
``lockgate.authz.cases``) and exits 1 when any case fails. Also runnable as
``python -m lockgate.cli policy validate DIR``. A starting point for the capability functions
of a module (schema fragment and commented policies): ``lockgate adapter scaffold``.
``lockgate policy shadow DIR`` runs a bundle beside the active one on live traffic, and
``lockgate policy promote`` makes it the active one (``lockgate.cli.shadow``).

For a person it prints the policies and the cases in words; with ``--json`` (before or
after the subcommand) one JSON document for ``validate`` and a JSON line per case for
``test``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cedarpy

from lockgate.authz.cases import CaseError, CaseResult, load_cases, run_cases
from lockgate.authz.engine import BundleError, PolicyBundle
from lockgate.cli import shadow
from lockgate.cli.group import OwnArguments, Subparsers
from lockgate.client.output import Output

_POLICY_REF = re.compile(r"\bpolicy(\d+)\b")
# The engine joins validation errors with "; "; each starts with Cedar's policy name.
_SEPARATE = re.compile(r"; (?=policy\d+: )")


def parser() -> argparse.ArgumentParser:
    """The ``policy`` command line."""
    p = argparse.ArgumentParser(prog="lockgate policy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _json(p, top=True)
    sub = p.add_subparsers(dest="policy_command", required=True)
    v = sub.add_parser("validate", help="load a bundle; list its policies or its errors")
    _json(v)
    v.add_argument("dir", type=Path, help="directory of *.cedar policies and *.cedarschema fragments")
    t = sub.add_parser("test", help="run case tables against a bundle")
    _json(t)
    t.add_argument("dir", type=Path, help="directory of *.cedar policies and *.cedarschema fragments")
    t.add_argument("cases", type=Path, nargs="+", metavar="CASES.yaml", help="case tables")
    shadow.add_parsers(sub, _json)
    return p


def _json(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    # The ``lockgate`` command's own --json (``lockgate.cli.group.json_flag``): the policy
    # commands parse their arguments apart, without a broker.
    p.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                   help="machine output: one JSON document (validate), a JSON line per case (test)")


def policy_main(argv: Sequence[str] | None = None) -> int:
    """Run ``lockgate policy …``.

    Args:
        argv: the arguments after ``policy`` (``sys.argv[1:]`` when ``None``).

    Returns:
        0 when the bundle is valid and every case passed, 1 when not, 2 on a usage error.
    """
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else 2
    out = Output(json=args.json)
    if args.policy_command == "validate":
        return _validate(args.dir, out)
    if args.policy_command in ("shadow", "promote"):
        return shadow.run(args, out)
    return _test(args.dir, args.cases, out)


def _load(directory: Path) -> PolicyBundle | None:
    try:
        return PolicyBundle.load(directory)
    except BundleError as exc:
        print(f"invalid bundle {directory}:", file=sys.stderr)
        for part in _SEPARATE.split(str(exc)):
            print(f"  {part}", file=sys.stderr)
        for line in _locate(directory, str(exc)):
            print(f"  {line}", file=sys.stderr)
        return None


def _validate(directory: Path, out: Output) -> int:
    bundle = _load(directory)
    if bundle is None:
        return 1
    sources = _sources_by_id(directory)
    ids = sorted(bundle.order, key=bundle.order.__getitem__)
    counts = {e: sum(1 for i in ids if bundle.effects[i] == e) for e in ("forbid", "permit")}
    width = max((len(i) for i in ids), default=0)
    text = [f"bundle   {directory}", f"revision {bundle.revision}",
            f"{len(ids)} policies ({counts['forbid']} forbid, {counts['permit']} permit)"]
    text += [f"  {bundle.effects[pid]:<6}  {pid:<{width}}  {sources.get(pid, '')}".rstrip()
             for pid in ids]
    out.record({"bundle": str(directory), "revision": bundle.revision,
                "policies": [{"id": pid, "effect": bundle.effects[pid], "file": sources.get(pid)}
                             for pid in ids]}, text="\n".join(text))
    return 0


def _test(directory: Path, tables: Sequence[Path], out: Output) -> int:
    bundle = _load(directory)
    if bundle is None:
        return 1
    passed = failed = 0
    for table in tables:
        try:
            cases = load_cases(table)
        except CaseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        results = run_cases(bundle, cases)
        if out.json:
            out.rows({}, [_case_json(table, r) for r in results])
        else:
            text = [f"{table}:"]
            for result in results:
                text.append(f"{'PASS' if result.passed else 'FAIL'} {result.case.name}")
                text += [] if result.passed else [f"     {line}" for line in _explain(result)]
            out.note("\n".join(text))
        passed += sum(r.passed for r in results)
        failed += sum(not r.passed for r in results)
    out.note(f"{passed} passed, {failed} failed (bundle {bundle.revision})")
    return 1 if failed else 0


def _case_json(table: Path, result: CaseResult) -> dict[str, Any]:
    """A case's result as a JSON line of ``policy test --json``."""
    return {"table": str(table), "case": result.case.name, "where": result.case.where,
            "passed": result.passed, "expected": result.expected, "actual": result.actual,
            "reasons": list(result.reasons), "determining": list(result.determining),
            "problems": list(result.problems), "errors": list(result.errors)}


def _explain(result: CaseResult) -> list[str]:
    """Why a case failed: what it expected, what was decided, and what decided it."""
    lines = [f"at {result.case.where}"]
    lines += result.problems
    lines.append(f"expected: {result.expected}"
                 + (f" [{', '.join(sorted(result.case.reasons))}]"
                    if result.case.reasons is not None else ""))
    lines.append(f"actual:   {result.actual} [{', '.join(result.reasons)}]")
    lines.append(f"determining policies: {', '.join(result.determining) or 'none'}")
    lines += [f"error: {e}" for e in result.errors]
    return lines


def _policies_in_files(directory: Path) -> tuple[list[tuple[Path, int, str | None]], list[str]]:
    """Every policy in the order ``PolicyBundle.load`` reads them, with its file and ``@id``.

    Cedar names the policies of the concatenated text ``policy0``, ``policy1``, …; this
    says which file and ``@id`` each one is. Also returns the files that do not parse.
    """
    located: list[tuple[Path, int, str | None]] = []
    broken: list[str] = []
    for path in sorted(directory.rglob("*.cedar")):
        try:
            est = json.loads(cedarpy.policies_to_json_str(path.read_text()))
        except (ValueError, OSError) as exc:
            broken.append(f"{_shown(directory, path)}: {exc}")
            continue
        policies = est.get("staticPolicies", {})
        ordered = sorted(policies, key=lambda k: int(k.removeprefix("policy") or 0))
        for position, key in enumerate(ordered, start=1):
            located.append((path, position, policies[key].get("annotations", {}).get("id")))
    return located, broken


def _sources_by_id(directory: Path) -> dict[str, str]:
    located, _ = _policies_in_files(directory)
    return {pid: _shown(directory, path) for path, _, pid in located if pid}


def _locate(directory: Path, message: str) -> list[str]:
    """Where the policies a bundle error names (``policyN``) are, and which files do not parse."""
    located, broken = _policies_in_files(directory)
    if broken:
        return broken
    lines = []
    for number in sorted({int(n) for n in _POLICY_REF.findall(message)}):
        if number < len(located):
            path, position, pid = located[number]
            name = f'@id("{pid}")' if pid else "no @id"
            lines.append(f"policy{number} is policy {position} of {_shown(directory, path)} ({name})")
    return lines


def _shown(directory: Path, path: Path) -> str:
    try:
        return str(path.relative_to(directory))
    except ValueError:
        return str(path)


def _register(sub: Subparsers) -> None:
    sub.add_parser("policy", help="validate a policy bundle, run its case tables, try one on live "
                                  "traffic as a shadow and promote it", add_help=False)


#: Policy authoring works on files (no broker; ``shadow`` and ``promote`` find the running
#: system themselves) and parses its own arguments, so the ``lockgate`` parser only lists it.
POLICY = OwnArguments("policy", _register, policy_main)
