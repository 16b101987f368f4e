"""The compose profile's read side logs in to PostgreSQL with the password file, never a password in its URL.

``docker-compose.yml`` hands the projector, archiver and console
``LOCKGATE_VIEWS_URL=postgresql://lockgate@postgres:5432/lockgate`` and ``PGPASSFILE`` (the
file ``python -m lockgate.operations.deployment`` makes). Here a PostgreSQL server that
requires a password is given the one in that file, and the views and their lease open
with such a URL and that password file, and not without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lockgate.operations import postgres
from lockgate.operations.deployment import (
    VIEWS_DATABASE,
    VIEWS_PASSWORD_FILE,
    VIEWS_PGPASS_FILE,
    VIEWS_USER,
    ensure_views_secrets,
)
from lockgate.operations.postgres import PostgresServer
from lockgate.views.lease import lease_for
from lockgate.views.store import open_views
from tests.conftest import require_postgres


@pytest.fixture(autouse=True)
def _postgres_installed() -> None:
    require_postgres()


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "secrets"
    ensure_views_secrets(directory)
    return directory


@pytest.fixture
def password_server(secrets_dir: Path) -> Iterator[PostgresServer]:
    """A server whose ``lockgate`` user has the generated password, required over TCP."""
    password = (secrets_dir / VIEWS_PASSWORD_FILE).read_text().strip()
    with PostgresServer() as server:
        trusted = f"postgresql://{postgres.USER}@127.0.0.1:{server.port}/{postgres.DATABASE}"
        with psycopg.connect(trusted, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {VIEWS_DATABASE}")
            conn.execute(f"ALTER USER {VIEWS_USER} PASSWORD '{password}'")
            (server.data / "pg_hba.conf").write_text(
                "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
            conn.execute("SELECT pg_reload_conf()")
        yield server


def views_url(server: PostgresServer) -> str:
    return f"postgresql://{VIEWS_USER}@127.0.0.1:{server.port}/{VIEWS_DATABASE}"


def test_the_views_open_with_the_password_file(
    password_server: PostgresServer, secrets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (secrets_dir / VIEWS_PGPASS_FILE).stat().st_mode & 0o077 == 0  # libpq insists
    monkeypatch.setenv("PGPASSFILE", str(secrets_dir / VIEWS_PGPASS_FILE))
    views = open_views(views_url(password_server))
    del views
    lease = lease_for(views_url(password_server), secrets_dir)
    assert lease.try_acquire()
    lease.release()


def test_without_the_password_file_the_server_refuses(
    password_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    assert "PGPASSWORD" not in os.environ
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(views_url(password_server), connect_timeout=5).close()
