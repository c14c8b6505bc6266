"""The kernel launcher that runs student code in a sandbox while nbgrader grades it.

Each workspace's "python3" kernelspec runs ``python -m autograder.isolation.launcher
{connection_file}`` (interrupts travel as kernel messages), which gets the kernel forked
from a fork server (autograder.isolation.forkserver) or starts it here with `--inner`. The settings come from the
environment variable AUTOGRADER_SANDBOX (JSON, see `Settings` and `Limits`), which
`autograder.grading.workspace.autograde` sets for each nbgrader run; without it the kernel
starts as usual.

Layers, outermost first:
1. Namespaces, where the machine allows them (`probe()`): the kernel runs under
   ``unshare`` in its own network namespace (no network at all: not even loopback is
   up; the kernel talks to nbgrader over Unix sockets), mount namespace (the grading
   workspace, the solutions, the autograder and the repository's history are hidden
   under empty read-only tmpfs mounts) and PID namespace (every process the student
   starts dies with the kernel). The launcher dies with nbgrader (PR_SET_PDEATHSIG), so
   killing a run that went past the notebook time limit takes the whole tree down.
2. Inside them the whole file system is read-only, /tmp is a private tmpfs of
   `Limits.tmp_mb` (other kernels' folders vanish) that holds only this run's folder, and the kernel then
   enters a user namespace of its own: the mounts are locked (student code cannot undo
   them, even as root) and RLIMIT_NPROC applies to it. no_new_privs is set.
3. Resource limits: address space (`Limits.memory_mb` less the /tmp's size: the two are the
   memory the kernel may hold), file size, process count, CPU seconds, no core files; and a
   seccomp filter that refuses the memory no limit would count (`refuse_uncounted_memory`).
4. A private working directory holding only the student's notebook, HOME and TMPDIR
   inside it, and an environment reduced to an allow-list (no tokens or secrets).
5. In the kernel (`autograder.isolation.guard`): an audit hook that refuses network sockets,
   os.fork, signals and opening the hidden paths even where namespaces are missing, and
   an output cap. The test cells never run in the kernel (autograder.isolation.boundary).
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from autograder.isolation.waiting import readable_within

ENV = "AUTOGRADER_SANDBOX"
KEEP_ENV = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHASHSEED", "PYTHONWARNINGS", "NBGRADER_EXECUTION",
    "MPLBACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TQDM_DISABLE", "COURSE_DATA_DIR", "COURSE_OFFLINE",
    "COURSE_FAST", "COURSE_DEVICE", "CUDA_VISIBLE_DEVICES", "JPY_SESSION_NAME",
)
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x4000, 0x40000
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
# The new mount API (Linux >= 5.12); these numbers are the same on x86-64 and arm64.
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
AT_FDCWD, AT_RECURSIVE, O_CLOEXEC = -100, 0x8000, 0o2000000
OPEN_TREE_CLONE, MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_RDONLY = 1, 4, 1
TMP_INODES = 4096  # files and folders of a kernel's private /tmp
# libseccomp's constants (seccomp.h): allow by default; a refused call fails with ACT_ERRNO | errno
SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, SCMP_FLTATR_CTL_TSYNC, NR_SCMP_ERROR = 0x7FFF0000, 0x00050000, 4, -1
UNCOUNTED_MEMORY_CALLS = ("memfd_create", "memfd_secret", "shmget", "msgget", "mq_open")


def _limit(default: int, meaning: str):
    return field(default=default, metadata={"help": meaning})


@dataclass
class Limits:
    """What one graded notebook may use: the defaults are set here and only here (each is an
    option of `python -m autograder grade`, whose help shows them; the base nbgrader
    configuration takes its cell timeout from here too)."""

    cell_timeout: int = _limit(120, "seconds a cell may run (nbgrader interrupts it; the rest still runs)")
    notebook_timeout: int = _limit(900, "seconds a notebook may run (the run is killed; the hand-in scores 0)")
    memory_mb: int = _limit(6144, "MiB of memory a grading kernel may hold: its address space (RLIMIT_AS) and its "
                                  "private /tmp (--tmp-mb) together; memfd_create and System V and POSIX shared "
                                  "memory and queues, which no limit counts, are refused")
    output_kb: int = _limit(2048, "KiB of text and display output a notebook may send, in total")
    file_mb: int = _limit(256, "MiB of the largest file a grading kernel may write (RLIMIT_FSIZE)")
    processes: int = _limit(128, "processes and threads of a grading kernel's user (RLIMIT_NPROC)")
    runner_memory_mb: int = _limit(1536, "MiB of data memory of a hand-in's trusted test runner (RLIMIT_DATA); 0: none")
    tmp_mb: int = _limit(64, "MiB of a grading kernel's private /tmp (a tmpfs, where namespaces allow one), "
                             "counted in --memory-mb")

    def __post_init__(self):
        if not 0 < self.tmp_mb < self.memory_mb:
            raise ValueError(f"the kernel's /tmp ({self.tmp_mb} MiB) must be part of its memory ({self.memory_mb} MiB)")

    @property
    def address_space_mb(self) -> int:
        """What of `memory_mb` the kernel's address space may take: the rest is its /tmp."""
        return self.memory_mb - self.tmp_mb


@dataclass
class Settings:
    """The JSON carried to the launcher in AUTOGRADER_SANDBOX."""

    limits: Limits = field(default_factory=Limits)
    base: str = ""                  # folder under which each kernel gets its private directory
    hide: list = field(default_factory=list)       # folders the kernel must not see
    notebook: str = ""              # the student's notebook, copied into the working directory
    isolation: list = field(default_factory=list)  # the unshare prefix from probe() ([]: none)
    experiment_cells: list = field(default_factory=list)  # sha1[:16] of the cells not run (autograder.grading.experiments)
    key_file: str = ""              # the log's MAC key, in the hidden workspace (read before isolation)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> "Settings":
        data = json.loads(text)
        return cls(limits=Limits(**data.pop("limits", {})), **data)


@lru_cache(maxsize=1)
def probe() -> tuple[str, list[str]]:
    """Which isolation this machine allows: ("namespaces", unshare prefix) or ("none", [])."""
    unshare = shutil.which("unshare")
    if not unshare or sys.platform != "linux" or os.environ.get("AUTOGRADER_NO_NAMESPACES"):
        return "none", []
    prefix = [unshare]
    if os.geteuid() != 0:
        prefix += ["--user", "--map-root-user"]
    prefix += ["--mount", "--net", "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc"]
    base = tempfile.mkdtemp(prefix="course-probe-")
    try:
        check = [*prefix, sys.executable, "-m", "autograder.isolation.sandbox", "--probe", base]
        ok = subprocess.run(check, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    finally:
        os.rmdir(base)
    return ("namespaces", prefix) if ok else ("none", [])


def describe() -> str:
    """One line on the isolation in use, for reports."""
    kind, _ = probe()
    memory = "; seccomp refuses memory no limit counts" if _libseccomp() else \
        "; no libseccomp: memfd_create and System V shared memory are not refused"
    if kind == "namespaces":
        return "namespaces (network, mount, pid, user) via unshare; read-only file system; rlimits; audit hook" + memory
    return "no namespaces on this machine: rlimits, and an audit hook that refuses sockets, fork and hidden paths" + memory


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def _prctl(option: int, value: int) -> None:
    _libc().prctl(option, value, 0, 0, 0)


def _mount_tmpfs(path: str, size_mb: int = 0) -> None:
    """An empty read-only tmpfs on `path`, or (`size_mb`) a writable one of that size, whose inodes
    (kernel memory that its size does not count) are few too."""
    flags = MS_NOSUID | MS_NODEV | (0 if size_mb else MS_RDONLY | MS_NOEXEC)
    options = f"size={size_mb}m,nr_inodes={TMP_INODES},mode=1777" if size_mb else "size=4k,mode=0555"
    _check(_libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, options.encode()), f"mount tmpfs on {path}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _isolate_filesystem(base: str, hide: list[str], size_mb: int) -> list[str]:
    """In a fresh mount namespace: everything read-only, `hide` under empty tmpfs mounts,
    the parent of `base` (/tmp) private, a tmpfs of `size_mb`, so other runs' folders vanish, except `base`."""
    libc = _libc()
    tmp = os.path.dirname(base.rstrip(os.sep))  # where every run's folder lives (/tmp)
    keep = _check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, os.fsencode(base), OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC), "open_tree")
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    _check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr")
    writable = _MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)  # the kernel's own /proc (pid namespace) stays writable
    _check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/proc", 0, ctypes.byref(writable), ctypes.sizeof(writable)), "mount_setattr /proc")
    hidden = []
    for path in hide:
        if os.path.isdir(path) and not base.startswith(path.rstrip(os.sep) + os.sep):
            _mount_tmpfs(path)
            hidden.append(path)
    # What the kernel needs that may itself live in that folder (a clone and its virtual
    # environment under /tmp, the dataset mirror): cloned read-only, with the hidden mounts.
    needed = [(path, _check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, os.fsencode(path), OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC), "open_tree"))
              for path in _needed_under(tmp)]
    _mount_tmpfs(tmp, size_mb)
    os.makedirs(base)
    _check(libc.syscall(SYS_MOVE_MOUNT, keep, b"", AT_FDCWD, os.fsencode(base), MOVE_MOUNT_F_EMPTY_PATH), "move_mount")
    os.close(keep)
    for path, tree in needed:
        os.makedirs(path, exist_ok=True)
        _check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, os.fsencode(path), MOVE_MOUNT_F_EMPTY_PATH), "move_mount")
        os.close(tree)
        _check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, os.fsencode(path), AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr")
    return hidden


def _needed_under(tmp: str) -> list[str]:
    """The course's folder, the interpreter's environment and the dataset mirror, where they
    lie inside `tmp` (outermost paths only)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [repo, sys.prefix, os.environ.get("COURSE_DATA_DIR", "")]
    inside = sorted({os.path.realpath(c) for c in candidates if c and os.path.isdir(c)})
    inside = [p for p in inside if p.startswith(tmp.rstrip(os.sep) + os.sep)]
    return [p for p in inside if not any(p.startswith(q + os.sep) for q in inside if q != p)]


def _lock_mounts() -> None:
    """Enter a user namespace of our own (root inside maps to the same user outside):
    the mounts above become locked (they cannot be undone from inside), and RLIMIT_NPROC
    counts this kernel's processes even for root."""
    _check(_libc().unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(user, mount)")
    for name, text in (("setgroups", "deny"), ("uid_map", "0 0 1"), ("gid_map", "0 0 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def die_with_parent(parent_alive: int | None = None) -> None:
    """SIGKILL this process when its parent ends (and now, if it has ended already).

    `parent_alive`: the read end of a pipe whose only write end the parent holds (then closed
    here): end of file on it means the parent has ended. getppid() cannot tell that inside a new
    PID namespace (it is 0 there while the parent lives), so a kernel forked as PID 1 of one needs
    the pipe: else a supervisor that ended before this call left a kernel behind for good."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    ended = os.getppid() == 1
    if parent_alive is not None:
        ended = ended or readable_within(parent_alive, 0)
        os.close(parent_alive)
    if ended:
        os._exit(1)


def enter_namespaces(user: bool) -> None:
    """What probe()'s `unshare` prefix does, for a process forked by autograder.isolation.forkserver:
    new network and mount namespaces (mounts private), children in a new PID namespace, and,
    where the grader is not root, a user namespace in which it is root."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | (CLONE_NEWUSER if user else 0)
    _check(_libc().unshare(flags), "unshare(network, mount, pid)")
    if user:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    _check(_libc().mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")


def mount_proc() -> None:
    """A /proc of the PID namespace this process is the first of (`unshare --mount-proc`)."""
    libc = _libc()
    _check(libc.mount(b"none", b"/proc", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /proc")
    _check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, None), "mount proc")


def _set_limits(limits: Limits) -> None:
    def setl(which, value):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    setl(resource.RLIMIT_AS, limits.address_space_mb * 2**20)
    setl(resource.RLIMIT_FSIZE, limits.file_mb * 2**20)
    setl(resource.RLIMIT_CORE, 0)
    setl(resource.RLIMIT_CPU, limits.notebook_timeout + 30)
    setl(resource.RLIMIT_NPROC, limits.processes)  # threads count too; fatal to a fork bomb
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big write fails with EFBIG instead


def refuse_uncounted_memory() -> None:
    """A seccomp filter (libseccomp's, where the machine has it) on this process and its threads:
    the system calls that give memory no limit counts (UNCOUNTED_MEMORY_CALLS: memfd_create,
    memfd_secret; System V shared memory and message queues and POSIX message queues, which outlive
    the kernel too) fail with EPERM (`describe` says when the machine lacks libseccomp). Needs
    no_new_privs (or privilege)."""
    seccomp = _libseccomp()
    if seccomp is None:
        return
    seccomp.seccomp_init.restype = ctypes.c_void_p
    seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
    seccomp.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    seccomp.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    seccomp.seccomp_load.argtypes = seccomp.seccomp_release.argtypes = [ctypes.c_void_p]
    context = seccomp.seccomp_init(SCMP_ACT_ALLOW)
    try:
        for call in UNCOUNTED_MEMORY_CALLS:
            number = seccomp.seccomp_syscall_resolve_name(call.encode())
            if number != NR_SCMP_ERROR:  # (an older libseccomp does not know memfd_secret)
                _seccomp_check(seccomp.seccomp_rule_add_array(context, SCMP_ACT_ERRNO | errno.EPERM, number, 0, None), call)
        _seccomp_check(seccomp.seccomp_attr_set(context, SCMP_FLTATR_CTL_TSYNC, 1), "TSYNC")
        _seccomp_check(seccomp.seccomp_load(context), "seccomp_load")
    finally:
        seccomp.seccomp_release(context)


def _libseccomp():
    try:
        return ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return None


def _seccomp_check(result: int, what: str) -> None:
    if result < 0:  # libseccomp returns -errno
        raise OSError(-result, f"seccomp {what}: {os.strerror(-result)}")


def _prepare_home(settings: Settings, runtime: Path) -> Path:
    """The kernel's private folder: work/ (the cwd: the notebook and the assignment's
    other files), and folders for IPython, matplotlib and the dataset cache."""
    base = Path(settings.base or tempfile.mkdtemp(prefix="course-sandbox-"))
    home = Path(tempfile.mkdtemp(prefix="kernel-", dir=base))
    work = home / "work"
    work.mkdir()
    if settings.notebook and Path(settings.notebook).is_file():
        shutil.copyfile(settings.notebook, work / Path(settings.notebook).name)
    # Files the assignment ships beside its notebook (nbgrader copied them into the cwd).
    for item in Path.cwd().iterdir() if Path.cwd() != runtime else ():
        if item.is_file() and item.suffix != ".ipynb" and item.stat().st_size < 50 * 2**20:
            shutil.copyfile(item, work / item.name)
    for sub in ("ipython", "mpl", "cache"):
        (home / sub).mkdir()
    return home


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    env.update(
        HOME=str(home / "work"), TMPDIR=str(home / "work"), IPYTHONDIR=str(home / "ipython"),
        MPLCONFIGDIR=str(home / "mpl"), COURSE_CACHE_DIR=str(home / "cache"), COURSE_OFFLINE="1",
        PYTHONNOUSERSITE="1",
        # What importing debugpy (ipykernel's debugger) sets when it is not set: set here, the
        # kernel sees the same environment whether it imported debugpy itself or was forked
        # from a server that had (autograder.isolation.forkserver.PRELOAD).
        PYDEVD_USE_FRAME_EVAL="NO",
    )
    return env


def _absolute_ipc(connection_file: str, home: Path) -> str:
    """The kernel works in another folder than nbgrader, which runs in the folder of the
    connection file: a relative ipc address is made absolute there, in a copy."""
    info = json.loads(Path(connection_file).read_text())
    if info.get("transport") != "ipc" or os.path.isabs(info.get("ip", "")):
        return connection_file
    info["ip"] = os.path.join(os.path.dirname(os.path.abspath(connection_file)), info["ip"])
    copy = home / "connection.json"
    copy.write_text(json.dumps(info))
    os.chmod(copy, 0o600)
    return str(copy)


def inner(argv: list[str]) -> None:
    """Inside the namespaces (or directly, without them): set up, then run the kernel."""
    try:  # a session and process group of its own: killpg(0) or a terminal signal reaches no grader process
        os.setsid()
    except OSError:  # already a session leader (jupyter_client starts the launcher so)
        pass
    from autograder.isolation import guard  # before the autograder's folder is hidden
    from autograder.isolation.boundary import kernel_side

    settings = Settings.from_env(os.environ.get(ENV, "{}"))
    key = guard.read_key(settings.key_file)  # before the workspace that holds it is hidden
    connection_file, extra = argv[0], argv[1:]
    origin = os.getcwd()  # the folder of the notebook nbgrader runs (its student's)
    home = _prepare_home(settings, Path(connection_file).resolve().parent)
    if os.environ.get("COURSE_DATA_DIR"):  # a link to the mirror may lie in the folder made private
        os.environ["COURSE_DATA_DIR"] = os.path.realpath(os.environ["COURSE_DATA_DIR"])
    hidden = []
    if os.environ.get("AUTOGRADER_IN_NAMESPACE") and settings.base:
        hidden = _isolate_filesystem(settings.base, settings.hide, settings.limits.tmp_mb)  # no file may be open for writing
        _lock_mounts()
    connection_file = _absolute_ipc(connection_file, home)
    log = open(home / "guard.jsonl", "a", buffering=1, encoding="utf-8")
    output = os.open(home / "kernel-output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    env = _environment(home)
    _set_limits(settings.limits)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    refuse_uncounted_memory()
    os.chdir(home / "work")
    os.environ.clear()
    os.environ.update(env)
    os.dup2(output, 1)  # what reaches the real stdout/stderr stays here, capped by RLIMIT_FSIZE
    os.dup2(output, 2)
    sys.path[:] = [p for p in sys.path if p and not any(p == h or p.startswith(h + os.sep) for h in hidden)]
    guard.launch(connection_file, extra, log, settings, hidden, key, origin, kernel_side.install)


def main(argv: list[str] | None = None) -> None:
    """`--probe BASE` (run by probe() under unshare: can we isolate?) or `--inner CONNECTION_FILE`
    (run by autograder.isolation.launcher, inside the namespaces where there are some)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--probe"]:
        _isolate_filesystem(argv[1], [], Limits().tmp_mb)
        _lock_mounts()
    elif argv[:1] == ["--inner"]:
        inner(argv[1:])
    else:
        raise SystemExit("usage: python -m autograder.isolation.sandbox --probe BASE | --inner CONNECTION_FILE [ARGS]")


def exec_inner(argv: list[str]) -> None:
    """Become the sandboxed kernel: `--inner` in a new interpreter, under probe()'s `unshare`
    prefix where the machine allows namespaces."""
    prefix = Settings.from_env(os.environ[ENV]).isolation  # probed once by the grader
    command = [sys.executable, "-m", "autograder.isolation.sandbox", "--inner", *argv]
    if prefix:
        os.environ["AUTOGRADER_IN_NAMESPACE"] = "1"
        os.execv(prefix[0], [*prefix, *command])
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main()
