"""The two small programs that enforce a sandbox from within: the guard inside, the stager outside.

Both are Python source handed to an interpreter with ``-I -S`` (no site packages, no
environment), so they depend on nothing but the standard library. The guard checks the
sandbox from inside and reports on a status pipe before it hands over to the command; the
stager, as root only, binds the sources read-only and drops to the host user before it
becomes bubblewrap. ``lockgate.worlds.repo.sandbox`` builds their arguments.
"""


# Runs inside the sandbox, as the sandbox's user, before the command: argv = status fd,
# the checks as JSON, the command. Only the standard library, no site packages.
GUARD = r"""
import ctypes, errno, json, os, resource, shutil, socket, sys
fd, spec, argv = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
failed, facts = [], {}

def check(name, ok, fact):
    facts[name] = fact
    if not ok:
        failed.append(name)

def refuses_write(path):
    try:
        probe = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600) if os.path.isdir(os.path.dirname(path)) else None
    except OSError as exc:
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT)
    if probe is None:
        return True
    os.close(probe)
    os.unlink(path)
    return False

def opens_for_write(path):
    try:
        os.close(os.open(path, os.O_WRONLY))
    except OSError:
        return False
    return True

try:
    shutil.copytree(spec["source"], spec["work"], symlinks=True, dirs_exist_ok=True)
    copied = True
except OSError as exc:
    copied = False
    facts["copy_error"] = "%s: %s" % (type(exc).__name__, exc.strerror or exc)
check("workspace", copied, spec["work"])

ns = {kind: os.readlink("/proc/self/ns/" + kind) for kind in ("net", "pid", "mnt", "user", "ipc", "uts")}
for kind, own in ns.items():
    check(kind + "_namespace", own != spec["parent"].get(kind), own)
names = sorted(name for _, name in socket.if_nameindex())
check("network", ns["net"] != spec["parent"]["net"] and names == ["lo"], ",".join(names))
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
check("processes_visible", len(pids) <= 3, len(pids))
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
caps = {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
check("user", os.getuid() == os.geteuid() == spec["uid"] and os.getgid() == spec["uid"] and os.getuid() != 0,
      os.getuid())
check("capabilities", not any(caps.values()) and status.get("NoNewPrivs", "").strip() == "1",
      "none" if not any(caps.values()) else repr(caps))
try:
    libc = ctypes.CDLL(None, use_errno=True)
    made = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER
except (OSError, AttributeError):
    made = True
check("user_namespaces", not made, "made" if made else "disabled")
check("proc_sys", not any(opens_for_write(p) for p in spec["sysctls"]), "read-only")
check("hidden", not [p for p in spec["hidden"] if os.path.lexists(p)],
      [p for p in spec["hidden"] if os.path.lexists(p)])
probe = ".lockgate-probe-%d" % os.getpid()
check("read_only", all(refuses_write(os.path.join(root, probe)) for root in spec["readonly"]),
      len(spec["readonly"]))
# bubblewrap names the directory it started in (PWD); nothing else may be there.
seen = sorted(name for name in os.environ if name != "PWD")
check("environment", seen == sorted(spec["env"]), seen)
limits = spec["limits"]
for name, value in limits.items():
    which = getattr(resource, name)
    try:
        resource.setrlimit(which, (value, value))
    except (OSError, ValueError) as exc:
        facts["limit_error_" + name] = str(exc)
    check(name, resource.getrlimit(which) == (value, value), value)
verdict = "ok" if not failed else "refused"
os.write(fd, json.dumps({"verdict": verdict, "failed": failed, "facts": facts}).encode())
os.close(fd)
if verdict != "ok":
    os._exit(97)
os.chdir(spec["cwd"])
os.environ["PWD"] = spec["cwd"]
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write("sandbox: cannot run %s: %s\n" % (argv[0], exc.strerror))
    os._exit(127)
"""


# Runs as root outside the sandbox, in a private mount namespace of its own: binds each
# source read-only onto its staging place, drops to the host user, and becomes bubblewrap.
STAGER = r"""
import ctypes, json, os, sys
spec, argv = json.loads(sys.argv[1]), sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
for source, target in spec["binds"]:
    for flags in (MS_BIND | MS_REC, MS_BIND | MS_REMOUNT | MS_RDONLY):
        if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            sys.stderr.write("sandbox: cannot stage %s: %s\n" % (source, os.strerror(err)))
            os._exit(96)
os.setgroups([])
os.setresgid(spec["uid"], spec["uid"], spec["uid"])
os.setresuid(spec["uid"], spec["uid"], spec["uid"])
os.execv(argv[0], argv)
"""
