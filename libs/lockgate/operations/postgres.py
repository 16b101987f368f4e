"""A PostgreSQL server from the installed ``initdb``/``pg_ctl`` on a loopback port: for
tests a throwaway one (temporary data directory, removed afterwards), for
``lockgate run --cluster`` one whose data is kept under ``var/``.

PostgreSQL refuses to run as root; started by root, the server runs as the system's
``postgres`` user (or ``nobody``), which then owns the data directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from lockgate.operations.natsserver import free_port

#: The database and user the tests connect as (trust authentication on loopback only).
DATABASE = "postgres"
USER = "lockgate"


def _reachable(directory: Path, user: pwd.struct_passwd) -> None:
    """Refuse, saying what to do, a directory the server's user cannot reach: every
    directory above its data must let others through (``o+x``), or initdb fails with
    a bare "Permission denied".

    Raises:
        PostgresUnavailable: one of them does not.
    """
    for d in (directory.resolve(), *directory.resolve().parents):
        st = d.stat()
        if st.st_uid != user.pw_uid and not st.st_mode & 0o001:
            raise PostgresUnavailable(
                f"PostgreSQL runs as {user.pw_name} (not as root), which cannot enter {d}: "
                f"let others through it (chmod o+x {d}) or set LOCKGATE_VIEWS_URL")


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are not installed, or the server did not start."""


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / name).exists():
            return str(root / name)
    raise PostgresUnavailable(f"{name} is not installed")


def available() -> bool:
    """Whether ``initdb`` and ``pg_ctl`` can be found."""
    try:
        _binary("initdb")
        _binary("pg_ctl")
    except PostgresUnavailable:
        return False
    return True


class PostgresServer:
    """One PostgreSQL server, started on enter and removed on exit.

    Given a ``root`` (``lockgate run --cluster`` keeps its views under ``var/``), the
    data directory is kept: a second start reuses it, ``stop`` leaves it, and the server
    keeps PostgreSQL's durable defaults. Without one it is a throwaway test server in a
    temporary directory, without fsync.
    """

    def __init__(self, root: Path | None = None, port: int = 0) -> None:
        self.port = port or free_port()
        self.keep = root is not None
        self.root = root or Path(tempfile.mkdtemp(prefix="lockgate-pg-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._user: pwd.struct_passwd | None = None

    @property
    def url(self) -> str:
        """``postgresql://`` URL of the server's default database."""
        return f"postgresql://{USER}:unused@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *args: str) -> None:
        user = self._user
        try:
            subprocess.run(
                args, check=True, capture_output=True, timeout=120,
                user=user.pw_uid if user else None, group=user.pw_gid if user else None,
                cwd=self.root,
            )
        except subprocess.CalledProcessError as exc:
            raise PostgresUnavailable(
                f"{Path(args[0]).name} failed: {exc.stderr.decode(errors='replace')[-400:]}"
            ) from exc

    def start(self) -> None:
        """Create the cluster and start the server (waiting until it accepts connections)."""
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    self._user = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            if self._user is not None:
                _reachable(self.root.parent, self._user)
                os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
                if self.data.exists():
                    os.chown(self.data, self._user.pw_uid, self._user.pw_gid)
        if not (self.data / "PG_VERSION").exists():
            self._run(_binary("initdb"), "-D", str(self.data), "-U", USER, "--auth=trust",
                      "-E", "UTF8", "--no-sync", "--no-instructions")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        if not self.keep:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(_binary("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
