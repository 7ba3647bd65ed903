"""`coloco node doctor` against a real anvil, a real ledger served by uvicorn and a real
rendezvous store: a ready node passes every check (exit 0); each broken part fails its own check,
names its fix, and the command exits 1; the clock check against a chain whose blocks run ahead."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coloco_cli.main import app
from coloco_cli.node.doctor import MAX_BEHIND_S, check_clock
from protocol.devnet import AnvilProcess, free_port
from reference.data import Corpus
from tests.integration.test_cli_audit import ledger_url  # noqa: F401 - pytest fixture
from tests.ledger.conftest import nodes  # noqa: F401 - pytest fixture
from trainer.network.rendezvous import serve

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

CHECKS = ["chain", "stake", "ledger", "rendezvous", "clock", "data", "resources"]


@pytest.fixture
def rendezvous() -> Iterator[str]:
    """`coloco rendezvous serve`'s store, in a thread of the test."""
    port, stop, ready = free_port(), threading.Event(), threading.Event()
    thread = threading.Thread(
        target=serve, args=("127.0.0.1", port), kwargs={"stop": stop, "on_ready": ready.set},
        daemon=True,
    )  # fmt: skip
    thread.start()
    assert ready.wait(30), "the rendezvous did not start"
    yield f"127.0.0.1:{port}"
    stop.set()
    thread.join(10)


def _doctor(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(app, ["node", "doctor", "--json", *args])
    assert result.output, f"{args}: {result.exception!r}"
    return result.exit_code, json.loads(result.output)


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def test_doctor_passes_a_ready_node(
    chain: AnvilProcess,
    cli_env: Path,
    ledger_url: str,  # noqa: F811
    nodes: list[Any],  # noqa: F811
    rendezvous: str,
    tmp_path: Path,
) -> None:
    # a block of now: the clock is compared with the latest one. anvil's clock restarts from the
    # snapshot's block at every revert, so after a long session it lags the wall clock (738 s in
    # a full run under load): the next block's time is set, not left to it
    chain.call("evm_setNextBlockTimestamp", [int(time.time())])
    chain.call("evm_mine", [])
    code, report = _doctor(
        "--node", str(nodes[0].address), "--rendezvous", rendezvous, "--ledger-url", ledger_url,
        "--checkpoint-dir", str(tmp_path),
    )  # fmt: skip
    assert [c["name"] for c in report["checks"]] == CHECKS
    assert [c for c in report["checks"] if not c["ok"]] == []
    assert report["ok"] is True and code == 0
    checks = _by_name(report)
    assert f"0x{Corpus.stdlib().root.hex()} (the run's)" in checks["data"]["detail"]
    assert "registered" in checks["stake"]["detail"]


def test_doctor_names_the_fix_of_each_failed_check(
    chain: AnvilProcess, cli_env: Path, tmp_path: Path
) -> None:
    other = tmp_path / "mydata"
    other.mkdir()
    (other / "notes.txt").write_text("not the run's data\n" * 200)
    stranger = "0x" + "42" * 20
    code, report = _doctor(
        "--node", stranger, "--rendezvous", f"127.0.0.1:{free_port()}",
        "--ledger-url", chain.rpc_url,  # the chain's RPC, not a ledger
        "--data", str(other), "--checkpoint-dir", str(tmp_path),
    )  # fmt: skip
    assert code == 1 and report["ok"] is False
    checks = _by_name(report)
    assert checks["chain"]["ok"] and checks["resources"]["ok"]
    assert "is not registered" in checks["stake"]["detail"]
    assert checks["stake"]["fix"].startswith("coloco node register")
    assert "not a coloco ledger" in checks["ledger"]["detail"]
    assert "--ledger-url" in checks["ledger"]["fix"]
    assert "refuses connections" in checks["rendezvous"]["detail"]
    assert "coloco rendezvous serve" in checks["rendezvous"]["fix"]
    data = checks["data"]
    assert "is not the run's data" in data["detail"]
    assert f"0x{Corpus.stdlib().root.hex()}" in data["detail"]
    assert f"0x{Corpus.from_folder(other).root.hex()}" in data["detail"]
    assert "omit --data" in data["fix"]
    # the text form: one line a check, each failure followed by its fix
    text = CliRunner().invoke(
        app, ["node", "doctor", "--node", stranger, "--rendezvous", f"127.0.0.1:{free_port()}",
              "--ledger-url", chain.rpc_url, "--checkpoint-dir", str(tmp_path)],
    )  # fmt: skip
    assert text.exit_code == 1
    assert "fix: coloco node register" in text.output
    assert "checks passed; failed: stake, ledger, rendezvous" in " ".join(text.output.split())


def test_doctor_clock_check_fails_when_the_chain_runs_ahead(tmp_path: Path) -> None:
    """A chain of its own (the session's anvil must keep its time): its latest block an hour
    ahead of this machine's clock is a clock this node must fix before it signs rounds."""
    anvil = AnvilProcess.start(tmp_path / "anvil")
    try:
        assert check_clock(anvil).ok  # type: ignore[arg-type] - it reads only .w3
        anvil.call("evm_setNextBlockTimestamp", [int(time.time()) + 3600])
        anvil.call("evm_mine", [])
        late = check_clock(anvil)  # type: ignore[arg-type]
        assert not late.ok
        assert f"behind by more than {MAX_BEHIND_S} s" in late.detail
        assert "timedatectl" in late.fix
    finally:
        anvil.stop()
