"""The executor's report-token key: made once, private, the same for every later start."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lockgate.runtime.keys import KEY_BYTES, KeyFileError, report_key, report_key_path
from lockgate.runtime.settings import Settings


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_key_is_made_on_first_use_private_and_kept(tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path / "var")
    key = report_key(settings)
    path = report_key_path(settings)
    assert path == tmp_path / "var" / "secrets" / "report.key"
    assert len(key) == KEY_BYTES and path.read_bytes() == key
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert report_key(settings) == key  # a restart reads the same key
    assert list(path.parent.iterdir()) == [path]  # nothing staged is left behind


def test_replicas_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path)
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: report_key(settings), range(32)))
    assert len(keys) == 1 and report_key_path(settings).read_bytes() in keys


def test_a_configured_key_file_is_used_as_it_is(tmp_path: Path) -> None:
    given = tmp_path / "mounted" / "key"
    given.parent.mkdir()
    given.write_bytes(b"s" * 40)
    settings = Settings(var_dir=tmp_path / "var", report_key_file=given)
    assert report_key(settings) == b"s" * 40
    assert not (tmp_path / "var").exists()


def test_a_short_key_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "key"
    short.write_bytes(b"x" * 8)
    with pytest.raises(KeyFileError):
        report_key(Settings(report_key_file=short))


def test_the_key_file_is_read_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_REPORT_KEY_FILE", str(tmp_path / "k"))
    assert Settings().report_key_file == tmp_path / "k"
