"""How every ``lockgate`` command answers: a person by default, a script with ``--json``.

For a person, rows are a table (:func:`lockgate.client.tables.table`), one record is a
short ``key  value`` block or a sentence, and what happened is said in words: nothing
there has to be parsed as JSON. With ``--json`` stdout holds machine output only: one
JSON document for a record, JSON Lines for rows (one object per line, the same field
names from one release to the next), and the words a person would read go to stderr.
Errors are the CLI's one line on stderr in both modes.

Every command is handed an :class:`Output` and prints through it, so a new command
cannot answer another way. Text a model, an adapter or a remote server wrote is
untrusted: what a person reads of it is cleaned of control and direction-override
characters (as :mod:`lockgate.client.tables` does).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

from lockgate.client.tables import table
from lockgate.contracts.consequence import clean

#: What a column shows of a row: the value under a field name, or what a function makes of the row.
Column = str | Callable[[Mapping[str, Any]], object]

#: A value longer than this is cut in a person's ``key  value`` block.
VALUE_MAX_CHARS = 200


class Output:
    """Where a command's answer goes, and in which form (``--json`` or not)."""

    def __init__(self, *, json: bool = False, stdout: TextIO | None = None,
                 stderr: TextIO | None = None) -> None:
        """An output for one command.

        Args:
            json: machine output (``--json``) instead of a person's.
            stdout: where answers go (default: ``sys.stdout`` when written).
            stderr: where notes go in machine mode (default: ``sys.stderr`` when written).
        """
        self.json = json
        self._stdout = stdout
        self._stderr = stderr
        self._blocks = 0

    # -- what a command says ------------------------------------------------------------

    def record(self, data: Mapping[str, Any], *, text: str | None = None) -> None:
        """One record: a JSON document, or ``text`` (default: a ``key  value`` block) for a person.

        ``text`` is printed as given: a caller that puts untrusted text in it cleans it.
        """
        if self.json:
            self._write(self._out(), json.dumps(data, default=str))
        else:
            self._block(fields(data) if text is None else text)

    def rows(self, columns: Mapping[str, Column], items: Iterable[Mapping[str, Any]], *,
             empty: str = "nothing to show", widest: int = 60) -> None:
        """Rows: JSON Lines of ``items``, or a table of ``columns`` (header → field or function).

        A person is told ``empty`` when there are none; a script gets no line. A cell is
        cut at ``widest`` characters.
        """
        if self.json:
            out = self._out()
            for item in items:
                self._write(out, json.dumps(item, default=str))
            return
        listed = list(items)
        if not listed:
            self._block(empty)
            return
        getters = [_getter(c) for c in columns.values()]
        self._block(table(list(columns), [[cell(g(item)) for g in getters] for item in listed],
                          widest=widest))

    def note(self, text: str) -> None:
        """Words for a person: on stdout, or on stderr with ``--json`` (stdout stays machine output)."""
        if self.json:
            self._write(self._err(), text)
        else:
            self._block(text)

    def warn(self, text: str) -> None:
        """A warning that does not end the command: ``lockgate: …`` on stderr in both modes."""
        self._write(self._err(), f"lockgate: {text}")

    # -- plumbing -----------------------------------------------------------------------

    def _out(self) -> TextIO:
        return self._stdout if self._stdout is not None else sys.stdout

    def _err(self) -> TextIO:
        return self._stderr if self._stderr is not None else sys.stderr

    def _block(self, text: str) -> None:
        # Blocks of one answer (two tables, a table and a sentence) are a blank line apart.
        out = self._out()
        if self._blocks and text:
            out.write("\n")
        self._blocks += 1
        self._write(out, text.rstrip("\n"))

    @staticmethod
    def _write(stream: TextIO, line: str) -> None:
        stream.write(line + "\n")
        stream.flush()


def cell(value: object) -> str:
    """A value as a person reads it in a table: ``-`` for none, yes/no, lists joined."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    return str(value)


def fields(data: Mapping[str, Any]) -> str:
    """A record as a ``key  value`` block: empty values left out, nested records flattened,
    a list of records as a table under its name; every value cleaned for a terminal."""
    pairs: list[tuple[str, str]] = []
    tables: list[str] = []
    for key, value in _flat(data):
        if _records(value):
            columns = _scalar_keys(value)
            if columns:
                tables.append(f"{clean(key, 80)}:\n" + table([c.upper() for c in columns],
                                                  [[cell(r.get(c)) for c in columns] for r in value]))
            continue
        if value is None or value == "" or value == [] or value == ():
            continue
        pairs.append((clean(key, 80), clean(cell(value), VALUE_MAX_CHARS)))
    width = max((len(k) for k, _ in pairs), default=0)
    lines = [f"{k.ljust(width)}  {v}" for k, v in pairs]
    return "\n\n".join(part for part in ("\n".join(lines), *tables) if part) or "(empty)"


def _flat(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out += _flat(value, f"{name}.")
        else:
            out.append((name, value))
    return out


def _records(value: object) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(v, Mapping) for v in value)


def _scalar_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for row in rows:
        for k, v in row.items():
            if not isinstance(v, (Mapping, list, tuple)):
                keys[k] = None
    return list(keys)


def _getter(column: Column) -> Callable[[Mapping[str, Any]], object]:
    if isinstance(column, str):
        return lambda item: item.get(column)
    return column
