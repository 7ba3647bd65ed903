"""No process a test starts outlives it, children and grandchildren included.

The test process puts a tag in its environment (``PYTEST_PROCESS_OWNER=<its pid>``); every
process it starts, and everything those start, inherits it, even after its parent died and init
adopted it (a demo killed with SIGKILL leaves its anvil and forge behind). After each test,
:func:`stop_new` stops every tagged process born during the test that is still running
(SIGTERM, then SIGKILL); at the end of the session :func:`stop_all` stops whatever tagged
process is left. Python's own helper processes (multiprocessing's resource tracker and fork
server, kept for the life of the test process by design) are left to the session's end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

TAG_VAR = "PYTEST_PROCESS_OWNER"  # not COLOCO_*: tests hand children an env without those
_KEPT = (b"multiprocessing.resource_tracker", b"multiprocessing.forkserver")

Proc = tuple[int, int]  # (pid, start time in clock ticks): a pid reused later is another process


def tag_this_process() -> None:
    """Tag this process's environment: what it starts from now on carries the tag."""
    os.environ[TAG_VAR] = str(os.getpid())


def tagged() -> set[Proc]:
    """Every running process (zombies excluded) that carries this process's tag, but itself."""
    tag = f"{TAG_VAR}={os.environ.get(TAG_VAR, '')}".encode()
    out: set[Proc] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z" and tag in environ.split(b"\0"):
            out.add((pid, int(stat[19])))
    return out


def stop_new(before: set[Proc]) -> list[str]:
    """Stop the tagged processes that were not in `before`; return the command lines stopped."""
    return _stop([p for p in tagged() - before if not any(k in _cmdline(p[0]) for k in _KEPT)])


def stop_all() -> list[str]:
    """Stop every tagged process; return the command lines stopped."""
    return _stop(list(tagged()))


def _stop(procs: list[Proc], grace_s: float = 5.0) -> list[str]:
    names = [_cmdline(pid).replace(b"\0", b" ").decode(errors="replace")[:200] for pid, _ in procs]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            if _running(*proc):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(proc[0], sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_running(*p) for p in procs):
            time.sleep(0.05)
    for pid, _ in procs:  # a child of this process: reap it so no zombie stays behind
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    return names


def _running(pid: int, started: int) -> bool:
    """Is this incarnation of `pid` still there and not a zombie?"""
    stat = _stat(pid)
    return stat is not None and int(stat[19]) == started and stat[0] != "Z"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after "pid (comm) ": [0] is the state, [19] the start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
