"""``lockgate policy``: validate a policy bundle and run case tables against it.

``lockgate policy validate DIR`` loads ``DIR`` as the policy service does and lists its
policies; ``lockgate policy test DIR CASES.yaml …`` checks each case table (see
``lockgate.authz.cases``) and exits 1 when any case fails. Also runnable as
``python -m lockgate.authz.cli validate DIR``. A starting point for the capability functions
of a module (schema fragment and commented policies): ``lockgate adapter scaffold``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import cedarpy

from lockgate.authz.cases import CaseError, CaseResult, load_cases, run_cases
from lockgate.authz.engine import BundleError, PolicyBundle

_POLICY_REF = re.compile(r"\bpolicy(\d+)\b")
# The engine joins validation errors with "; "; each starts with Cedar's policy name.
_SEPARATE = re.compile(r"; (?=policy\d+: )")


def parser() -> argparse.ArgumentParser:
    """The ``policy`` command line."""
    p = argparse.ArgumentParser(prog="lockgate policy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="policy_command", required=True)
    v = sub.add_parser("validate", help="load a bundle; list its policies or its errors")
    v.add_argument("dir", type=Path, help="directory of *.cedar policies and *.cedarschema fragments")
    t = sub.add_parser("test", help="run case tables against a bundle")
    t.add_argument("dir", type=Path, help="directory of *.cedar policies and *.cedarschema fragments")
    t.add_argument("cases", type=Path, nargs="+", metavar="CASES.yaml", help="case tables")
    return p


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
    if args.policy_command == "validate":
        return _validate(args.dir)
    return _test(args.dir, args.cases)


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


def _validate(directory: Path) -> int:
    bundle = _load(directory)
    if bundle is None:
        return 1
    sources = _sources_by_id(directory)
    ids = sorted(bundle.order, key=bundle.order.__getitem__)
    counts = {e: sum(1 for i in ids if bundle.effects[i] == e) for e in ("forbid", "permit")}
    print(f"bundle   {directory}")
    print(f"revision {bundle.revision}")
    print(f"{len(ids)} policies ({counts['forbid']} forbid, {counts['permit']} permit)")
    width = max((len(i) for i in ids), default=0)
    for pid in ids:
        print(f"  {bundle.effects[pid]:<6}  {pid:<{width}}  {sources.get(pid, '')}".rstrip())
    return 0


def _test(directory: Path, tables: Sequence[Path]) -> int:
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
        print(f"{table}:")
        for result in run_cases(bundle, cases):
            if result.passed:
                passed += 1
                print(f"PASS {result.case.name}")
            else:
                failed += 1
                print(f"FAIL {result.case.name}")
                for line in _explain(result):
                    print(f"     {line}")
    print("-" * 40)
    print(f"{passed} passed, {failed} failed (bundle {bundle.revision})")
    return 1 if failed else 0


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


if __name__ == "__main__":
    sys.exit(policy_main())
