"""A throwaway PostgreSQL server for tests: the installed ``initdb``/``pg_ctl``, an
ephemeral loopback port, a temporary data directory, stopped and removed afterwards.

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

from lockgate.runtime.natsserver import free_port

#: The database and user the tests connect as (trust authentication on loopback only).
DATABASE = "postgres"
USER = "lockgate"


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
    """One PostgreSQL server, started on enter and removed on exit."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="lockgate-pg-"))
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
                os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        self._run(_binary("initdb"), "-D", str(self.data), "-U", USER, "--auth=trust",
                  "-E", "UTF8", "--no-sync", "--no-instructions")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run(_binary("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
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
