"""The process manager leaves no orphans: whole process groups stop, on exit and on signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coloco_cli.procs import (
    InterruptedBySignalError,
    ProcessManager,
    port_open,
    wait_until,
)
from protocol.devnet import free_port
from protocol.errors import ColocoError
from tests.integration.pids import alive as _alive
from tests.integration.pids import wait_gone as _wait_gone


def test_stop_all_kills_children_and_grandchildren(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    with ProcessManager(handle_signals=False) as procs:
        child = procs.start(
            "shell", ["bash", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], tmp_path / "sh.log"
        )
        wait_until(pidfile.exists, timeout=5, what="the grandchild's pid file")
        time.sleep(0.1)
        grandchild = int(pidfile.read_text())
        assert _alive(child.pid) and _alive(grandchild)
    assert _wait_gone(child.pid)
    assert _wait_gone(grandchild), "the grandchild outlived the process manager"
    assert procs.children == []


def test_a_listening_child_frees_its_port(tmp_path: Path) -> None:
    port = free_port()
    server = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    with ProcessManager(handle_signals=False) as procs:
        child = procs.start("http", server, tmp_path / "http.log")
        wait_until(
            lambda: port_open("127.0.0.1", port), timeout=20, what="http.server", child=child
        )
    assert not port_open("127.0.0.1", port)


def test_wait_until_reports_a_child_that_died_with_its_log(tmp_path: Path) -> None:
    with ProcessManager(handle_signals=False) as procs:
        child = procs.start("bad", ["bash", "-c", "echo boom-marker; exit 3"], tmp_path / "b.log")
        with pytest.raises(ColocoError, match="boom-marker") as info:
            wait_until(lambda: False, timeout=10, what="something", child=child)
    assert "exited with code 3" in info.value.message


def test_cleanups_run_after_children_even_if_one_fails(tmp_path: Path) -> None:
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise ColocoError("cleanup boom")

    with ProcessManager(handle_signals=False) as procs:
        procs.add_cleanup("first", lambda: ran.append("first"))
        procs.add_cleanup("failing", failing)
    assert ran == ["failing", "first"]
    with pytest.raises(ColocoError, match="already stopped"):
        procs.start("late", ["true"])


SIGNAL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from coloco_cli.procs import ProcessManager, InterruptedBySignalError
    out = Path(sys.argv[1])
    try:
        with ProcessManager() as procs:
            child = procs.start("sleeper", ["sleep", "300"])
            out.write_text(str(child.pid))
            time.sleep(120)
    except InterruptedBySignalError as exc:
        print("interrupted:", exc.message, flush=True)
        sys.exit(130)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_parent_stops_every_child(tmp_path: Path, signum: int) -> None:
    script = tmp_path / "parent.py"
    script.write_text(SIGNAL_SCRIPT)
    pidfile = tmp_path / "child.pid"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    parent = subprocess.Popen(
        [sys.executable, str(script), str(pidfile)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text() != "", timeout=30, what="child")
        child_pid = int(pidfile.read_text())
        assert _alive(child_pid)
        parent.send_signal(signum)
        out, _ = parent.communicate(timeout=30)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 130
    assert "every process this command started was stopped" in out
    assert _wait_gone(child_pid), "the child outlived its interrupted parent"
    assert InterruptedBySignalError.code == "interrupted"
