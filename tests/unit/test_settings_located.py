"""A process started outside ``lockgate run`` finds the running system as the CLI does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockgate.operations.deployment import write_run_info
from lockgate.runtime.credentials import RunInfo, credentials_path
from lockgate.runtime.settings import Settings


@pytest.fixture
def var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("LOCKGATE_NATS_URL", "LOCKGATE_CREDENTIALS_FILE", "LOCKGATE_NATS_USER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCKGATE_VAR_DIR", str(tmp_path))
    return tmp_path


def test_the_broker_and_the_adapters_user_come_from_what_the_run_wrote(var: Path) -> None:
    write_run_info(var, RunInfo(url="nats://127.0.0.1:40123", pid=os.getpid(),
                                credentials_dir=str(var / "credentials")))
    own = credentials_path(var, "adapter-tickets")
    own.parent.mkdir(parents=True)
    own.write_text("{}")
    located = Settings().located("tickets")
    assert (located.nats_url, located.credentials_file) == ("nats://127.0.0.1:40123", own)
    assert Settings().located("other").credentials_file is None  # no such user: nothing guessed


def test_what_was_set_stands(var: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run_info(var, RunInfo(url="nats://127.0.0.1:40123", pid=os.getpid()))
    monkeypatch.setenv("LOCKGATE_NATS_URL", "nats://127.0.0.1:4555")
    assert Settings().located().nats_url == "nats://127.0.0.1:4555"


def test_without_a_run_nothing_changes(var: Path) -> None:
    settings = Settings()
    assert settings.located("tickets") is settings
