"""The test sandbox attacked from inside: each way out a command could try, tried, and refused.

Every attack runs real code under bubblewrap through ``run_sandboxed`` (the adapter's own
path), with the same settings the repository world's adapter uses, and checks the host
afterwards: the secrets it aimed at, the files it tried to write, the processes it tried
to see. A probe also runs the same attack *outside* the sandbox where that shows the probe
can tell (a listener it reaches, a file it reads), so a refusal is the sandbox's doing.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.worlds.repo.sandbox import (
    BASE_ENV,
    SandboxSettings,
    SandboxUnavailable,
    run_sandboxed,
)
from tests.conftest import require

SECRET = "s3cr3t-credential-4b1d"


async def _sandbox_works(tmp_path: Path) -> str:
    try:
        outcome = await run_sandboxed(["true"], tmp_path, SandboxSettings())
    except SandboxUnavailable as exc:
        return exc.detail
    return "" if outcome.exit_code == 0 else outcome.output


@pytest.fixture
async def sandbox(tmp_path: Path) -> Path:
    """An empty checkout to run in; skips (fails in CI) where bubblewrap cannot make a sandbox."""
    work = tmp_path / "checkout"
    work.mkdir()
    why = await _sandbox_works(work)
    require(not why, f"bubblewrap cannot make the test sandbox here ({why}): "
            "`make test` installs it as root (apt-get install bubblewrap)")
    return work


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    """A deployment's state as the adapter's host has it: credentials, keys, a world."""
    var = tmp_path / "deployment" / "var"
    (var / "credentials").mkdir(parents=True)
    (var / "secrets").mkdir()
    for n in range(21):
        creds = var / "credentials" / f"user-{n}.creds"
        creds.write_text(f"{SECRET}-{n}")
        creds.chmod(0o600)
    (var / "secrets" / "report.key").write_text(SECRET + "-key")
    (var / "secrets" / "report.key").chmod(0o600)
    return var


def python(code: str) -> list[str]:
    return ["python", "-c", code]


def settings(deployment: Path | None = None, **overrides: object) -> SandboxSettings:
    hidden = (str(deployment.parent), str(deployment), str(Path(sys.prefix).resolve())) if deployment else ()
    return SandboxSettings(hidden=hidden, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    try:
        yield server
    finally:
        server.close()


async def test_every_credentials_file_and_key_is_out_of_reach(sandbox: Path, deployment: Path) -> None:
    paths = sorted(str(p) for p in deployment.rglob("*") if p.is_file())
    assert len(paths) == 22 and all(SECRET in Path(p).read_text() for p in paths)  # the host has them
    probe = (
        "import json, os, sys\n"
        "got = {}\n"
        "for p in json.loads(sys.argv[1]):\n"
        "    try: got[p] = open(p).read()\n"
        "    except OSError as exc: got[p] = 'refused:' + type(exc).__name__\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try: got['/proc/' + pid + '/environ'] = open('/proc/' + pid + '/environ').read()\n"
        "    except OSError as exc: got['/proc/' + pid] = 'refused:' + type(exc).__name__\n"
        "print(json.dumps(got))\n"
    )
    os.environ["LOCKGATE_TEST_SECRET"] = SECRET  # in the adapter's own environment too
    try:
        outcome = await run_sandboxed([*python(probe), json.dumps(paths)], sandbox,
                                      settings(deployment, output_max_bytes=1 << 16))
    finally:
        del os.environ["LOCKGATE_TEST_SECRET"]
    got = json.loads(outcome.output)
    assert SECRET not in outcome.output
    assert {got[p] for p in paths} == {"refused:FileNotFoundError"}
    assert outcome.decision()["filesystem"] == "private"
    assert str(deployment) not in outcome.decision()["visible"]


async def test_nothing_is_written_outside_the_throwaway_copy(
    sandbox: Path, deployment: Path, tmp_path: Path
) -> None:
    targets = [deployment / "planted", deployment.parent / "planted", tmp_path / "planted",
               Path("/tmp") / f"lockgate-planted-{os.getpid()}", sandbox / "planted",
               Path(sys.prefix) / "planted.pth", Path(sys.base_prefix) / "planted"]
    probe = (
        "import json, sys\n"
        "for p in json.loads(sys.argv[1]) + ['/usr/planted', '/planted', '/sandbox/site/planted',"
        " '/sandbox/src/planted']:\n"
        "    try:\n"
        "        open(p, 'w').write('x'); print('WROTE', p)\n"
        "    except OSError as exc: print('refused', p, type(exc).__name__)\n"
        "open('planted', 'w').write('inside the copy')\n"
    )
    outcome = await run_sandboxed([*python(probe), json.dumps([str(t) for t in targets])], sandbox,
                                  settings(deployment, output_max_bytes=1 << 16))
    assert outcome.exit_code == 0, outcome.output
    assert [t for t in targets if t.exists()] == []
    assert "WROTE /usr" not in outcome.output and "WROTE /planted" not in outcome.output
    assert "WROTE /sandbox/site" not in outcome.output and "WROTE /sandbox/src" not in outcome.output


async def test_the_interpreter_and_the_runner_cannot_be_changed(sandbox: Path) -> None:
    import pytest as runner

    os_py = Path(os.__file__).resolve()
    pytest_init = Path(runner.__file__).resolve()
    before = (os_py.read_bytes(), pytest_init.read_bytes())
    probe = (
        "import os, sys, pytest\n"
        "for p in (os.__file__, pytest.__file__, os.path.dirname(os.__file__) + '/planted.py'):\n"
        "    try: open(p, 'a').write('\\nraise SystemExit(42)\\n'); print('WROTE', p)\n"
        "    except OSError as exc: print('refused', type(exc).__name__)\n"
        "try: os.chmod(os.__file__, 0o777); print('CHMOD')\n"
        "except OSError as exc: print('refused', type(exc).__name__)\n"
    )
    outcome = await run_sandboxed(python(probe), sandbox, settings())
    assert "WROTE" not in outcome.output and "CHMOD" not in outcome.output, outcome.output
    assert outcome.output.count("refused") == 4
    assert (os_py.read_bytes(), pytest_init.read_bytes()) == before
    assert not (os_py.parent / "planted.py").exists()


async def test_the_hosts_processes_are_not_there(sandbox: Path) -> None:
    probe = (
        "import os, sys\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "print('PIDS', pids)\n"
        "try: os.kill(int(sys.argv[1]), 0); print('SIGNALLED')\n"
        "except OSError as exc: print('refused', type(exc).__name__)\n"
    )
    outcome = await run_sandboxed([*python(probe), str(os.getpid())], sandbox, settings())
    pids = json.loads(outcome.output.split("PIDS ", 1)[1].splitlines()[0])
    assert len(pids) <= 3 and os.getpid() not in pids, outcome.output
    assert "SIGNALLED" not in outcome.output
    assert outcome.decision()["pid_namespace"] == "own"
    assert len([p for p in os.listdir("/proc") if p.isdigit()]) > len(pids)  # the host has more


async def test_a_fork_bomb_is_bounded_and_the_run_is_answered(sandbox: Path) -> None:
    probe = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 5000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "    print('FORKED', n)\n"
        "except OSError as exc: print('BOUNDED', n, type(exc).__name__)\n"
    )
    outcome = await run_sandboxed(python(probe), sandbox, settings(processes=32))
    assert "BOUNDED" in outcome.output, outcome.output
    assert int(outcome.output.split()[1]) < 32
    assert outcome.exit_code == 0  # the run ends (its children go with the PID namespace)
    again = await run_sandboxed(["true"], sandbox, settings())
    assert again.exit_code == 0  # and the next one runs


async def test_the_disk_cannot_be_filled(sandbox: Path) -> None:
    probe = (
        "import os\n"
        "total = 0\n"
        "for where in ('/sandbox/work', '/tmp', '/dev/shm'):\n"
        "    n = 0\n"
        "    try:\n"
        "        while n < 10000:\n"
        "            with open(f'{where}/fill-{n}', 'wb') as f: f.write(b'x' * (1 << 20))\n"
        "            n += 1; total += 1 << 20\n"
        "    except OSError as exc: print(where, 'FULL', type(exc).__name__)\n"
        "print('TOTAL', total)\n"
    )
    limit = 8 << 20
    outcome = await run_sandboxed(python(probe), sandbox, settings(workspace_bytes=limit))
    assert outcome.output.count("FULL") == 3, outcome.output
    assert int(outcome.output.split("TOTAL ")[1]) <= 3 * limit
    assert list(sandbox.iterdir()) == []  # nothing of it reached the host's copy


async def test_memory_cpu_and_open_files_are_bounded(sandbox: Path) -> None:
    memory = await run_sandboxed(python(
        "try: b = bytearray(512 << 20); print('ALLOCATED')\nexcept MemoryError: print('BOUNDED')"),
        sandbox, settings(memory_bytes=256 << 20))
    assert "BOUNDED" in memory.output, memory.output
    files = await run_sandboxed(python(
        "fs = []\ntry:\n    while len(fs) < 5000: fs.append(open('/dev/null'))\n"
        "except OSError as exc: print('BOUNDED', len(fs))"), sandbox, settings(open_files=64))
    assert "BOUNDED" in files.output and int(files.output.split()[1]) < 64, files.output
    cpu = await run_sandboxed(python("while True: pass"), sandbox, settings(cpu_s=1, timeout_s=30))
    # Killed by the kernel at its CPU limit (bubblewrap reports a signal as 128 + its number).
    assert not cpu.timed_out and cpu.exit_code in (128 + 9, 128 + 24), cpu
    assert cpu.decision()["cpu_s"] == 1


async def test_no_socket_reaches_anything(sandbox: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    probe = (
        "import socket\n"
        f"for host in ('127.0.0.1', '::1', '10.0.0.1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2); print('CONNECTED', host)\n"
        "    except OSError as exc: print('refused', host, type(exc).__name__)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"s.sendto(b'x', ('127.0.0.1', {port}))\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    outside = socket.create_connection(("127.0.0.1", port), timeout=2)  # the probe could tell
    outside.close()
    listener.accept()[0].close()
    outcome = await run_sandboxed(python(probe), sandbox, settings())
    assert "CONNECTED" not in outcome.output and outcome.output.count("refused") == 3, outcome.output
    assert "['lo']" in outcome.output
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing reached it from inside
    decision = outcome.decision()
    assert (decision["network"], decision["exit_code"]) == ("none", 0)
    assert decision["netns"] != os.readlink("/proc/self/ns/net")


async def test_no_privilege_is_left_to_gain(sandbox: Path) -> None:
    probe = (
        "import ctypes, os\n"
        "print('UID', os.getuid(), os.geteuid())\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('USERNS', libc.unshare(0x10000000))\n"
        "for p in ('/proc/sys/kernel/core_pattern', '/proc/sys/vm/overcommit_memory'):\n"
        "    try: os.close(os.open(p, os.O_WRONLY)); print('SYSCTL WRITABLE', p)\n"
        "    except OSError as exc: print('refused', type(exc).__name__)\n"
        "print([l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapBnd', 'NoNewPrivs'))])\n"
    )
    outcome = await run_sandboxed(python(probe), sandbox, settings())
    assert "UID 65534 65534" in outcome.output
    assert "USERNS -1" in outcome.output and "WRITABLE" not in outcome.output, outcome.output
    assert "CapEff:\\t0000000000000000" in outcome.output and "NoNewPrivs:\\t1" in outcome.output
    decision = outcome.decision()
    assert (decision["user"], decision["capabilities"], decision["user_namespaces"]) == (65534, "none", "disabled")


async def test_the_environment_is_made_from_nothing(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_REPO_WORLD_CREDENTIAL", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
    outcome = await run_sandboxed(python("import json, os; print(json.dumps(dict(os.environ)))"),
                                  sandbox, settings(), {"EXTRA": "1"})
    env = json.loads(outcome.output)
    assert set(env) == {*BASE_ENV, "PYTHONPATH", "PWD", "EXTRA"}
    assert "hunter" not in outcome.output


async def test_the_timeout_kills_the_command_and_its_children(sandbox: Path, tmp_path: Path) -> None:
    outcome = await run_sandboxed(
        ["sh", "-c", "(sleep 1; echo alive) & setsid sh -c 'sleep 1; echo escaped' & sleep 30"],
        sandbox, settings(timeout_s=0.5))
    assert (outcome.timed_out, outcome.exit_code) == (True, None)
    assert "alive" not in outcome.output and "escaped" not in outcome.output


async def test_the_output_is_bounded(sandbox: Path) -> None:
    outcome = await run_sandboxed(python("import sys; sys.stdout.write('x' * 100000); sys.stderr.write('E')"),
                                  sandbox, settings(output_max_bytes=1000))
    assert len(outcome.output) == 1000 and outcome.output_bytes == 100001
    assert outcome.output_truncated and outcome.exit_code == 0


async def test_the_guards_report_cannot_be_forged_by_the_command(sandbox: Path) -> None:
    forged = json.dumps({"verdict": "ok", "failed": [], "facts": {"net_namespace": "FORGED"}})
    probe = (
        "import os, sys\n"
        "for fd in range(3, 64):\n"
        "    try: os.write(fd, sys.argv[1].encode()); print('WROTE', fd)\n"
        "    except OSError: pass\n"
    )
    outcome = await run_sandboxed([*python(probe), forged], sandbox, settings())
    assert outcome.netns != "FORGED" and outcome.netns.startswith("net:")


async def test_no_bubblewrap_means_nothing_runs(tmp_path: Path) -> None:
    for bwrap in ("/bin/false", str(tmp_path / "no-such-bwrap")):
        with pytest.raises(SandboxUnavailable) as refused:
            await run_sandboxed(["sh", "-c", f"echo ran > {tmp_path / 'ran'}"], tmp_path,
                                SandboxSettings(bwrap=bwrap))
        assert refused.value.reason == "sandbox.unavailable"
    assert not (tmp_path / "ran").exists()


async def test_a_bubblewrap_that_isolates_nothing_is_caught_and_nothing_runs(tmp_path: Path) -> None:
    """A broken bwrap that runs the command as it is: the guard's checks refuse it."""
    fake = tmp_path / "fake-bwrap"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable) as refused:
        await run_sandboxed(["sh", "-c", f"echo ran > {marker}"], tmp_path, SandboxSettings(bwrap=str(fake)))
    assert refused.value.reason in ("sandbox.network-shared", "sandbox.not-contained", "sandbox.unavailable")
    assert not marker.exists()


async def test_a_hidden_path_that_shows_inside_fails_closed(sandbox: Path) -> None:
    """The guard checks what it is told must be absent: /usr is there, so nothing runs."""
    with pytest.raises(SandboxUnavailable) as refused:
        await run_sandboxed(["sh", "-c", "echo ran"], sandbox, SandboxSettings(hidden=("/usr/bin",)))
    assert refused.value.reason == "sandbox.not-contained"
    assert "hidden=['/usr/bin']" in refused.value.detail


async def test_a_checkout_written_under_a_strict_umask_still_runs(sandbox: Path) -> None:
    (sandbox / "pkg").mkdir(mode=0o700)
    (sandbox / "pkg" / "data.txt").write_text("readable")
    (sandbox / "pkg" / "data.txt").chmod(0o600)
    outcome = await run_sandboxed(["cat", "pkg/data.txt"], sandbox, settings())
    assert (outcome.exit_code, outcome.output) == (0, "readable")


async def test_a_checkout_larger_than_the_workspace_fails_closed(sandbox: Path) -> None:
    (sandbox / "big.bin").write_bytes(b"x" * (2 << 20))
    with pytest.raises(SandboxUnavailable) as refused:
        await run_sandboxed(["true"], sandbox, settings(workspace_bytes=1 << 20))
    assert refused.value.reason == "sandbox.unavailable" and "copied" in refused.value.detail
