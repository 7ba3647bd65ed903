"""What `coloco node run` shows: off a terminal, JSON log lines and no torch warnings; on one,
the live table with step/H, ETA, peers, attested rounds and earnings (trainer.round.progress)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest
from rich.console import Console

from protocol.attestation import ComputeAttestation
from protocol.devnet import free_port
from protocol.keys import create_keystore
from reference.inner import StepInfo
from trainer.round.attest import Signed
from trainer.round.progress import LedgerEarnings, NodeProgress
from trainer.round.runconfig import RunConfig
from trainer.round.schedule import RoundReport

ME, PEER = (
    "0xd09Ad14080d4b257a819a4f579b8485Be88f086c",
    "0x0CB030d11A8Be48b60418857874deEe61D1071e0",
)
RUN = bytes(range(32))


def _node(tmp: Path, name: str, key: int, port: int, corpus: Path, *host: str) -> list[str]:
    ks = tmp / f"{name}.json"
    create_keystore(ks, "pw", private_key=bytes([key]) * 32, kdf="pbkdf2", light=True)
    (tmp / "pw").write_text("pw\n")
    return [sys.executable, "-m", "coloco_cli", "node", "run", "--run-id", "out-test",
            "--keystore", str(ks), "--password-file", str(tmp / "pw"), "--offline",
            "--rendezvous", f"127.0.0.1:{port}", "--data", str(corpus), "--checkpoint-dir",
            str(tmp / f"ck-{name}"), "--rounds", "1", "--inner-steps", "2", "--batch-size", "2",
            "--min-nodes", "2", "--join-window", "5", *host]  # fmt: skip


def test_node_off_a_terminal_logs_json_lines_without_torch_warnings(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """Two real nodes, stderr to files (no terminal, no --plain): every line one JSON object,
    the round line the round's record, and no FutureWarning from a deprecated torch call (the
    all-reduce's all-gather)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLOCO_", "PYTHONWARN"))}
    procs, errs = [], []
    for name, key, host in (("a", 5, ("--host-rendezvous",)), ("b", 6, ())):
        errs.append(tmp_path / f"{name}.err")
        with errs[-1].open("wb") as err:
            procs.append(subprocess.Popen(_node(tmp_path, name, key, port, corpus_dir, *host),
                                          env=env, stdout=subprocess.DEVNULL, stderr=err,
                                          stdin=subprocess.DEVNULL))  # fmt: skip
    for proc in procs:
        assert proc.wait(timeout=240) == 0, [e.read_text()[-2000:] for e in errs]
    for err in errs:
        lines = err.read_text().splitlines()
        assert not [line for line in lines if "Warning" in line], err.read_text()[-3000:]
        records = [json.loads(line) for line in lines]  # each line one JSON object
        assert all(isinstance(r, dict) and {"ts", "level", "logger"} <= set(r) for r in records)
        rounds = [r for r in records if r.get("event") == "round_done"]
        assert [r["round"] for r in rounds] == [1], records
        assert len(rounds[0]["members"]) == 2 and rounds[0]["inner_steps"] == 2


@pytest.fixture
def ledger() -> Iterator[str]:
    """A real HTTP server answering GET /v1/nodes/ME as a ledger does (two verified rewarded
    rounds of RUN, one of another run)."""
    rows = [
        {"run_id": "0x" + RUN.hex(), "round": 1, "verified": True, "reward": str(10**18)},
        {"run_id": "0x" + RUN.hex(), "round": 2, "verified": True, "reward": str(5 * 10**17)},
        {"run_id": "0x" + bytes(32).hex(), "round": 1, "verified": True, "reward": str(10**20)},
    ]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path.startswith(f"/v1/nodes/{ME}")
            body = json.dumps({"address": ME, "rounds": rows} if ok else {"error": {}}).encode()
            self.send_response(200 if ok else 404)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _report(ledger_id: int | None) -> RoundReport:
    att = ComputeAttestation.from_json({
        "runId": "0x" + RUN.hex(), "round": 2, "node": ME, "configVersion": 0,
        "baseCheckpoint": "0x" + "11" * 32, "pseudoGradient": "0x" + "22" * 32,
        "dataShard": "0x" + "33" * 32, "innerSteps": 8, "tokens": 512,
        "resultCheckpoint": "0x" + "44" * 32, "traceRoot": "0x" + "45" * 32,
    })  # fmt: skip
    return RoundReport(
        round=2, members=(PEER, ME), rank=1, attempts=1, config=RunConfig.make(inner_steps=8),
        shard_id=b"\x33" * 32, steps=8, tokens=512, final_loss=2.5, bytes_sent=1000,
        base_hash=b"\x11" * 32, result_hash=b"\x44" * 32, eval_loss=2.25,
        signed=Signed(att, b"\x00" * 65, ledger_id),
    )  # fmt: skip


def test_node_live_table_shows_step_of_h_eta_peers_attested_and_earnings(ledger: str) -> None:
    console = Console(record=True, width=250, force_terminal=True)
    progress = NodeProgress(ME, console, LedgerEarnings(ledger, ME, RUN))
    with progress:
        progress.on_step(2, StepInfo(3, 2.5, 1000.0, of=8, elapsed_s=6.0))
        assert progress.cells()[:3] == ["2", "3/8", "10s"]  # 2 s a step, 5 steps to go
        progress.on_round(_report(ledger_id=7))
        progress.on_round(_report(ledger_id=None))  # kept for later: not attested yet
        deadline = time.monotonic() + 10
        while progress.earnings and progress.earnings.reward is None:
            assert time.monotonic() < deadline, "the ledger's earnings never arrived"
            time.sleep(0.05)
        cells = dict(zip(NodeProgress.COLUMNS, progress.cells(), strict=True))
    assert cells["peers"] == "1" and cells["attested"] == "1/2", cells
    assert cells["earned"] == "1.5 CMS (2 rounds)", cells  # this run's rounds only
    shown = console.export_text()  # the table's last render, on leaving
    assert "step/H" in shown and "1.5 CMS (2 rounds)" in shown, shown
