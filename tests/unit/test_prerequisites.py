"""``make prerequisites`` (which ``make test`` runs first): silent when everything is there, installs
what is missing as root with apt-get, and otherwise stops with one line saying what is missing.

The target runs with a PATH of stand-ins only, so nothing is installed and the machine's own
tools are not seen: ``id`` says who runs it, ``apt-get`` records what it was asked and puts the
packages' commands in place, ``bwrap`` succeeds or fails as the case needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lockgate.testing.system import REPO

#: The commands each Debian package provides here.
PROVIDES = {"postgresql": ("initdb", "pg_ctl"), "chromium": ("chromium",), "bubblewrap": ("bwrap",)}
EVERYTHING = ("postgresql", "chromium", "bubblewrap")


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


class Machine:
    """A directory of stand-ins for the commands the target uses; the only thing on its PATH."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.apt_log = root / "apt-get.log"
        for tool in ("ls", "chmod"):
            found = shutil.which(tool)
            assert found is not None
            (self.bin / tool).symlink_to(found)
        self.user(0)

    def user(self, uid: int) -> None:
        _script(self.bin / "id", f"echo {uid}")

    def has(self, *packages: str) -> None:
        for package in packages:
            for command in PROVIDES[package]:
                _script(self.bin / command, "exit 0")

    def apt_get(self) -> None:
        """An apt-get that records its arguments and installs each package's commands."""
        installs = "\n".join(
            f'    {package}) for c in {" ".join(commands)}; do printf "#!/bin/sh\\nexit 0\\n" > "{self.bin}/$c"; '
            f'chmod 755 "{self.bin}/$c"; done ;;'
            for package, commands in PROVIDES.items())
        _script(self.bin / "apt-get", f'echo "$@" >> "{self.apt_log}"\n'
                f'for p in "$@"; do case "$p" in\n{installs}\n    esac; done')

    def without_namespaces(self) -> None:
        _script(self.bin / "bwrap", "exit 1")

    def make(self, target: str = "prerequisites") -> subprocess.CompletedProcess[str]:
        make = shutil.which("make")
        assert make is not None
        return subprocess.run(
            [make, "-s", "-C", str(REPO), target,
             f"CHROMIUM_BIN={self.root / 'no-chromium'}", f"POSTGRES_LIB={self.root / 'no-postgresql'}"],
            env={"PATH": str(self.bin), "HOME": str(self.root)}, capture_output=True, text=True,
            timeout=60, check=False)

    def asked(self) -> list[str]:
        return self.apt_log.read_text().splitlines() if self.apt_log.exists() else []


def said(done: subprocess.CompletedProcess[str]) -> list[str]:
    """What the target said on stderr, without make's own line about the failed target."""
    return [line for line in done.stderr.splitlines() if not line.startswith("make:")]


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def test_with_everything_there_it_says_nothing_and_installs_nothing(machine: Machine) -> None:
    machine.has(*EVERYTHING)
    machine.apt_get()
    done = machine.make()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert machine.asked() == []


def test_as_root_with_apt_get_the_missing_packages_are_installed(machine: Machine) -> None:
    machine.has("chromium")
    machine.apt_get()
    done = machine.make()
    assert done.returncode == 0, done.stderr
    assert machine.asked() == ["install -y --no-install-recommends postgresql bubblewrap"]
    assert done.stdout.splitlines() == ["installing postgresql bubblewrap for the tests"]


@pytest.mark.parametrize("who", ["not root", "root without apt-get"])
def test_otherwise_one_line_names_what_is_missing(machine: Machine, who: str) -> None:
    if who == "not root":
        machine.user(1000)
        machine.apt_get()
    machine.has("bubblewrap")
    done = machine.make()
    assert done.returncode != 0
    assert said(done) == ["make test is missing Debian packages: postgresql chromium "
                          "(as root: apt-get install postgresql chromium; make test run as root installs them)"]
    assert machine.asked() == []


def test_without_user_namespaces_one_line_says_so(machine: Machine) -> None:
    machine.has(*EVERYTHING)
    machine.without_namespaces()
    done = machine.make()
    assert done.returncode != 0
    [line] = said(done)
    assert line.startswith("make test needs user namespaces for the test sandbox")


def test_make_run_installs_bubblewrap_as_root_and_otherwise_only_warns(machine: Machine) -> None:
    machine.apt_get()
    installed = machine.make("bubblewrap")
    assert (installed.returncode, machine.asked()) == (0, ["install -y --no-install-recommends bubblewrap"])
    (machine.bin / "bwrap").unlink()
    machine.user(1000)
    warned = machine.make("bubblewrap")
    assert warned.returncode == 0 and machine.asked() == ["install -y --no-install-recommends bubblewrap"]
    assert "repo.run_tests will be refused" in warned.stderr


def test_make_test_checks_them_first() -> None:
    make = shutil.which("make")
    assert make is not None
    planned = subprocess.run([make, "-n", "-C", str(REPO), "test"], capture_output=True, text=True,
                             env={**os.environ, "MAKEFLAGS": ""}, timeout=60, check=True).stdout
    assert planned.index("bwrap --unshare-all") < planned.index("pytest")
