"""Ctrl-C in the middle of `coloco demo` stops every process it started: no orphans, no ports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coloco_cli.procs import port_open
from tests.integration.pids import alive as _alive
from tests.integration.pids import wait_gone as _wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]


def test_sigint_mid_training_stops_everything(tmp_path: Path) -> None:
    work = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "coloco_cli", "demo", "--nodes", "2", "--rounds", "3",
        "--inner-steps", "50", "--workdir", str(work), "--report", str(tmp_path / "r.json"),
    ]  # fmt: skip
    demo = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "160"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        # wait until both trainers run (their logs exist) and anvil has written its pid
        while not (
            (work / "logs" / "node-2.log").exists() and (work / "anvil" / "anvil.pid").exists()
        ):
            assert demo.poll() is None, demo.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the demo never started its trainers"
            time.sleep(0.2)
        anvil_pid = int((work / "anvil" / "anvil.pid").read_text())
        time.sleep(2)
        demo.send_signal(signal.SIGINT)
        out, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode != 0
    assert "interrupted" in out, out[-3000:]
    started = json.loads((work / "processes.json").read_text())
    assert {"ledger", "rendezvous", "node-1", "node-2"} <= {p["name"] for p in started}
    for proc in [*started, {"name": "anvil", "pid": anvil_pid}]:
        assert _wait_gone(proc["pid"], timeout=10), f"{proc['name']} survived the interrupt"
    assert not _alive(anvil_pid)
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    assert [line for line in ps.stdout.splitlines() if str(work) in line] == []
    # the ledger's and the rendezvous' ports are free again
    match = re.search(r"ledger at http://127\.0\.0\.1:(\d+), rendezvous at 127\.0\.0\.1:(\d+)", out)
    assert match, out[-3000:]
    for port in match.groups():
        assert not port_open("127.0.0.1", int(port))
