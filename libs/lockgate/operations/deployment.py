"""One deployment's users and their credentials, made on first start and kept under ``var/``.

``lockgate run`` calls :func:`ensure_deployment` before it starts the broker: every role
of the table (``lockgate.operations.roles``) gets a NATS user with a generated password,
written to ``<var>/credentials/<user>.json`` (mode 0600, in a 0700 directory), and the
server's ``accounts`` block is rendered from the same roles into
``<var>/nats/accounts.conf`` (mode 0600). Passwords survive restarts, so clients that
hold a credentials file keep working; a role whose grants changed gets its file
rewritten with the same password. Nothing here is ever logged or put in an event.

While it runs, the supervisor writes ``<var>/run.json`` (no secrets: the URL, its pid,
where the credentials are), so every ``lockgate`` command finds the running system
whatever port it chose. Both files' formats, and how a process reads them, are the kit's
(``lockgate.runtime.credentials``): a process reads its own credentials without this module.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from lockgate.operations.roles import Role, render_accounts, roles
from lockgate.runtime.credentials import (
    Credentials,
    CredentialsError,
    RunInfo,
    credentials_dir,
    credentials_path,
    load_credentials,
    run_info_path,
)

#: A new credentials file is readable by its owner only.
FILE_MODE = 0o600
DIR_MODE = 0o700


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, readable by the owner only, from the first byte."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(DIR_MODE)


@dataclass(frozen=True)
class Deployment:
    """The users of one deployment, their credentials and the server configuration for them."""

    credentials: dict[str, Credentials]
    server_config: Path

    def of(self, user: str) -> Credentials:
        """The credentials of ``user``.

        Raises:
            CredentialsError: no such user in this deployment.
        """
        try:
            return self.credentials[user]
        except KeyError:
            raise CredentialsError(f"this deployment has no user {user!r}") from None


def _credentials(role: Role, password: str) -> Credentials:
    return Credentials(
        user=role.name, password=password, account=role.account,
        inbox_prefix=role.inbox_prefix, js_prefix=role.js_prefix, principal=role.principal,
    )


def ensure_deployment(
    var_dir: Path, roles: Iterable[Role], *, server_config: Path | None = None
) -> Deployment:
    """Make (or bring up to date) every role's credentials and the server's accounts block.

    Existing passwords are kept; new roles get a new one (``secrets.token_urlsafe``).

    Args:
        var_dir: credentials go to ``<var_dir>/credentials/<user>.json``.
        roles: every role of the deployment (``lockgate.operations.roles.roles``).
        server_config: where the accounts block goes (default ``<var_dir>/nats/accounts.conf``).
    """
    directory = credentials_dir(var_dir)
    _private_dir(directory)
    users: dict[str, tuple[Role, str]] = {}
    made: dict[str, Credentials] = {}
    for role in roles:
        path = credentials_path(var_dir, role.name)
        try:
            password = load_credentials(path).password
        except CredentialsError:
            password = secrets.token_urlsafe(24)
        users[role.name] = (role, password)
        wanted = _credentials(role, password)
        made[role.name] = wanted
        current = path.read_bytes() if path.exists() else b""
        encoded = msgspec.json.format(msgspec.json.encode(wanted)) + b"\n"
        if current != encoded:
            _write_private(path, encoded)
    conf = server_config or var_dir / "nats" / "accounts.conf"
    _private_dir(conf.parent)
    _write_private(conf, render_accounts(users).encode())
    return Deployment(made, conf)


def read_deployment(var_dir: Path) -> Deployment | None:
    """The credentials a deployment under ``var_dir`` wrote, or ``None`` when it has none."""
    directory = credentials_dir(var_dir)
    if not directory.is_dir():
        return None
    found: dict[str, Credentials] = {}
    for path in sorted(directory.glob("*.json")):
        with contextlib.suppress(CredentialsError):
            found[path.stem] = load_credentials(path)
    return Deployment(found, var_dir / "nats" / "accounts.conf") if found else None


def write_run_info(var_dir: Path, info: RunInfo) -> None:
    """Say where the running system is (no secrets in it)."""
    _write_private(run_info_path(var_dir), msgspec.json.encode(info) + b"\n")


def clear_run_info(var_dir: Path, pid: int) -> None:
    """Remove ``run.json`` if it is still this process's."""
    path = run_info_path(var_dir)
    with contextlib.suppress(OSError, msgspec.MsgspecError):
        if msgspec.json.decode(path.read_bytes(), type=RunInfo).pid == pid:
            path.unlink()


#: The views' PostgreSQL user and database in the compose profile.
VIEWS_USER = "lockgate"
VIEWS_DATABASE = "lockgate"
#: Where, beside the credentials, the compose profile's other secrets are.
SECRETS_DIR = "secrets"
#: The PostgreSQL server's password for ``VIEWS_USER`` (the server's container reads it).
VIEWS_PASSWORD_FILE = "postgres-password"
#: The same password as libpq's password file (``PGPASSFILE``) for the views' readers, so
#: that no password is in a URL or an environment variable.
VIEWS_PGPASS_FILE = "pgpass"


def ensure_views_secrets(directory: Path) -> None:
    """Make the views' PostgreSQL password and its libpq password file, once (mode 0600).

    A password already there is kept; the password file is rewritten from it.
    """
    _private_dir(directory)
    path = directory / VIEWS_PASSWORD_FILE
    try:
        password = path.read_text().strip()
    except FileNotFoundError:
        password = ""
    if not password:
        # URL-safe: no ':' or backslash, which the password file would need escaped.
        password = secrets.token_urlsafe(24)
        _write_private(path, password.encode() + b"\n")
    _write_private(directory / VIEWS_PGPASS_FILE,
                   f"*:*:{VIEWS_DATABASE}:{VIEWS_USER}:{password}\n".encode())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lockgate.operations.deployment --tenants a,b --out DIR``: a deployment's users.

    Writes ``DIR/accounts.conf`` (the servers include it) and ``DIR/credentials/<user>.json``
    (each process gets its own, as ``LOCKGATE_CREDENTIALS_FILE``), as ``lockgate run`` does
    under ``var/``, and ``DIR/secrets/`` (the views' PostgreSQL password, for the compose
    profile); running it again keeps the passwords.
    """
    parser = argparse.ArgumentParser(prog="python -m lockgate.operations.deployment")
    parser.add_argument("--tenants", required=True, help="comma-separated tenant ids")
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    args = parser.parse_args(argv)
    tenants = [t for t in args.tenants.split(",") if t]
    try:
        made = ensure_deployment(args.out, roles(tenants), server_config=args.out / "accounts.conf")
    except ValueError as exc:
        parser.error(str(exc))
    ensure_views_secrets(args.out / SECRETS_DIR)
    print(f"{len(made.credentials)} users: {made.server_config} and {credentials_dir(args.out)}/; "
          f"the views' PostgreSQL password in {args.out / SECRETS_DIR}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
