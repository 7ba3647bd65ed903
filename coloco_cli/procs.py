"""Child processes that never outlive their parent: own process groups, recorded, all stopped.

`ProcessManager` starts each child in its own session (so a Ctrl-C in the terminal reaches only
the parent, which then stops the children in order), records it, and on `stop_all()`, on leaving
its `with` block, on SIGINT/SIGTERM, or at interpreter exit sends SIGTERM to each child's whole
process group, waits, then SIGKILLs what is left. No orphans, no stale ports.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO

from protocol.errors import ColocoError, ConfigError

log = logging.getLogger(__name__)


class InterruptedBySignalError(ColocoError):
    """The parent received SIGINT or SIGTERM; every child has been (or is being) stopped."""

    code = "interrupted"


@dataclass
class Child:
    """One started child process."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path | None
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def pause(self) -> None:
        """SIGSTOP the child's process group (resume with `resume`)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGCONT)

    def log_tail(self, n_chars: int = 2000) -> str:
        """The last characters of the child's log (for error messages)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()[-n_chars:]
        return data.decode("utf-8", errors="replace")


def port_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_until(
    ready: Callable[[], bool], *, timeout: float, what: str, child: Child | None = None
) -> None:
    """Poll `ready()` until it holds; raise a ColocoError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if child is not None and not child.alive():
            raise ColocoError(
                f"{child.name} exited with code {child.popen.returncode} before {what}; "
                f"its log ({child.log_path}) ends with:\n{child.log_tail()}"
            )
        time.sleep(0.1)
    tail = f"; log {child.log_path} ends with:\n{child.log_tail()}" if child is not None else ""
    raise ColocoError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")


def kill_group(pid: int, *, grace: float = 5.0) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL it after `grace` seconds."""
    try:
        os.killpg(pid, signal.SIGTERM)
        os.killpg(pid, signal.SIGCONT)  # a paused (SIGSTOP) group must run to handle SIGTERM
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        # reap our own child if it is one, so it does not linger as a zombie
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


class ProcessManager:
    """Starts children in their own process groups and guarantees they are all stopped.

    Use as a context manager::

        with ProcessManager() as procs:
            anvil = procs.start("anvil", [anvil_path, "--port", "8545"], logs / "anvil.log")
            ...
    """

    def __init__(self, *, handle_signals: bool = True, grace: float = 5.0) -> None:
        self.children: list[Child] = []
        self.started: list[Child] = []
        """Every child ever started (kept after it stops), for reports and leak checks."""
        self._cleanups: list[tuple[str, Callable[[], None]]] = []
        self._grace = grace
        self._handle_signals = handle_signals
        self._old_handlers: dict[int, object] = {}
        self._stopped = False

    # --- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> ProcessManager:
        atexit.register(self.stop_all)
        if self._handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(ValueError):  # not the main thread: leave handlers alone
                    self._old_handlers[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._old_handlers.clear()
        atexit.unregister(self.stop_all)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.warning("received %s: stopping %d child process(es)", name, len(self.children))
        self.stop_all()
        raise InterruptedBySignalError(
            f"interrupted by {name}; every process this command started was stopped"
        )

    # --- children ------------------------------------------------------------------------------

    def start(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Child:
        """Start `argv` in a new process group; stdout+stderr go to `log_path` (or /dev/null)."""
        if self._stopped:
            raise ColocoError(f"cannot start {name}: this process manager was already stopped")
        log_file: IO[bytes] | None = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = log_path.open("ab")
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        try:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log_file if log_file is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            if log_file is not None:
                log_file.close()
            raise ConfigError(f"cannot start {name} ({argv[0]}): {exc}") from exc
        child = Child(name=name, popen=popen, log_path=log_path, _log_file=log_file)
        self.children.append(child)
        self.started.append(child)
        log.debug("started %s pid=%d: %s", name, popen.pid, " ".join(argv))
        return child

    def stop(self, child: Child) -> int | None:
        """Stop one child (its whole process group) and return its exit code."""
        kill_group(child.pid, grace=self._grace)
        try:
            code = child.popen.wait(timeout=self._grace)
        except subprocess.TimeoutExpired:
            child.popen.kill()
            code = child.popen.wait()
        if child._log_file is not None:
            child._log_file.close()
            child._log_file = None
        with contextlib.suppress(ValueError):
            self.children.remove(child)
        log.debug("stopped %s pid=%d code=%s", child.name, child.pid, code)
        return code

    def add_cleanup(self, name: str, fn: Callable[[], None]) -> None:
        """Run `fn` in `stop_all()` (after the children): for processes started elsewhere."""
        self._cleanups.append((name, fn))

    def stop_all(self) -> None:
        """Stop every recorded child (newest first), then run the cleanups. Idempotent."""
        for child in reversed(list(self.children)):
            self.stop(child)
        while self._cleanups:
            name, fn = self._cleanups.pop()
            try:
                fn()
            except (OSError, ColocoError) as exc:  # keep stopping the rest
                log.warning("cleanup of %s failed: %s", name, exc)
        self._stopped = True
