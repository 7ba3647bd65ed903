"""`coloco audit` against a real ledger served by uvicorn: --json, text, and its errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from typer.testing import CliRunner

from coloco_cli.main import app
from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess, free_port
from protocol.errors import ConfigError, LedgerError, LedgerUnavailableError

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()
RUN = "0x" + "ab" * 32


@pytest.fixture
def ledger_url(chain: AnvilProcess, deployment: Deployment, tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "deployment.json"
    deployment.save(path)
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, environment="test", rpc_url=chain.rpc_url, deployment=path,
        committer_private_key=chain.accounts[1][1], database_url=f"sqlite:///{tmp_path}/l.db",
        blob_dir=tmp_path / "blobs", admin_token="t" * 32, run_background=False,
        usefulness_model=None,
    )  # fmt: skip
    ledger = Ledger(settings)
    port = free_port()
    config = uvicorn.Config(
        create_app(ledger=ledger), host="127.0.0.1", port=port, log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=30)
        ledger.stop()


def test_audit_json_and_text_and_errors(ledger_url: str, cli_env: Path) -> None:
    base = ["audit", "--run-id", RUN, "--ledger-url", ledger_url, "--fraction", "1"]
    result = runner.invoke(app, [*base, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    out = json.loads(result.stdout)  # one object, nothing else on stdout
    assert out == {"run_id": RUN, "audited": 0, "failed": 0, "unavailable": 0, "unverifiable": 0,
                   "verdicts": []}  # fmt: skip

    result = runner.invoke(app, [*base, "--inner-lr", "0.001", "--mixture", "10000"])  # no chain
    assert result.exit_code == 0 and "audited 0, failed 0" in result.stdout
    result = runner.invoke(app, [*base, "--mixture", "half"])
    assert isinstance(result.exception, ConfigError) and "--mixture" in result.exception.message

    result = runner.invoke(app, [*base, "--limit", "0"])  # the ledger refuses it (422)
    assert isinstance(result.exception, LedgerError) and "422" in result.exception.message
    result = runner.invoke(app, ["audit", "--run-id", RUN, "--fraction", "2"])
    assert isinstance(result.exception, ConfigError) and "--fraction" in result.exception.message
    result = runner.invoke(app, ["audit", "--run-id", "0x12", "--ledger-url", ledger_url])
    assert isinstance(result.exception, ConfigError)
    dead = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["audit", "--run-id", RUN, "--ledger-url", dead, "--json"])
    assert isinstance(result.exception, LedgerUnavailableError)
    assert "--ledger-url" in result.exception.message
