"""`coloco market` against a real ledger (uvicorn on a free port, the anvil deployment, SQLite):
docs/cli.md's `<!-- market -->` block run as written, the human and --json outputs, and errors
that name the fix."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from bench.harness.nodes import NodeKey
from coloco_cli.main import app
from ledger.service import Ledger
from protocol.eip712 import Eip712Domain
from protocol.offer import label_bytes32
from tests.ledger.conftest import serving
from tests.ledger.test_market_api import body, make_offer

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
runner = CliRunner()


def doc_lines() -> list[list[str]]:
    text = DOC.read_text()
    block = re.search(r"<!-- market -->\s*```bash\n(.*?)```", text, re.S)
    assert block, "docs/cli.md: no ```bash block after <!-- market -->"
    return [shlex.split(line) for line in block.group(1).strip().splitlines()]


@pytest.fixture
def ledger_url(
    ledger: Ledger, nodes: list[NodeKey], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> object:
    monkeypatch.chdir(tmp_path)
    for var in ("COLOCO_CONFIG", "COLOCO_KEYSTORE", "COLOCO_ACCOUNT"):
        monkeypatch.delenv(var, raising=False)
    with serving(ledger) as url:
        ledger.indexer.catch_up()  # the served app prepared the database: the nodes are seen
        monkeypatch.setenv("COLOCO_LEDGER_URL", url)
        yield url


def coloco(*args: str) -> str:
    """The command's output, its whitespace runs made one space (the console wraps lines)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return " ".join(result.output.split())


def test_the_documented_market_block_runs_as_written(
    ledger_url: str, nodes: list[NodeKey], domain: Eip712Domain, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another node already offers 4 CPU devices with too little memory: the request names why
    cpu = make_offer(nodes[1], device_kind=label_bytes32("cpu"), device_count=4, memory_bytes=2**30)
    assert httpx.post(f"{ledger_url}/v1/market/offers", json=body(nodes[1], cpu, domain)).is_success
    monkeypatch.setenv("COLOCO_PRIVATE_KEY", "0x" + nodes[0].key.hex())
    offer, offers, request, request_json = doc_lines()
    assert [w for w in offer[:3]] == ["coloco", "market", "offer"]

    out = coloco(*offer[1:])
    assert f"from {nodes[0].address}: 8 x 141 GiB, 60 TFLOP/s each, at 0.002 ETH" in out
    assert "unverified (no matched hardware challenge)" in out

    out = coloco(*offers[1:])
    assert nodes[0].address in out and "nvidia-h200" in out and "10 Gbit/s" in out
    assert nodes[1].address not in out  # --device-kind nvidia-h200

    out = coloco(*request[1:])
    assert out.startswith("filled: 8 of 8 devices for 4 h, 0.064 ETH of 1 ETH")
    assert "each node needs 93.3 Mbit/s" in out  # 7 * 800 Mbit within a tenth of 600 s
    assert f"#1 offer 2 {nodes[0].address}" in out
    assert f"offer 1 {nodes[1].address}: memory: 1 GiB per device, below the 80 GiB" in out

    data = json.loads(coloco(*request_json[1:]))
    assert data["filled"] is False and data["devices"] == 8
    assert "16 devices needed, 8 chosen" in data["shortfall"]
    assert [n["code"] for n in data["not_chosen"]] == ["memory"]

    # the same offer again is refused as a replay once a newer one replaced it
    again = coloco(*offer[1:], "--price", "0.003", "--json")
    assert json.loads(again)["replaced"] is True
    stale = runner.invoke(app, [*offer[1:], "--nonce", "1"])
    assert stale.exit_code == 1
    assert "sign the offer with nonce 3" in str(stale.exception)


def test_errors_name_the_fix(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLOCO_PRIVATE_KEY", "0x" + "11" * 32)  # a key no node registered
    args = ["market", "offer", "--device-kind", "cpu", "--devices", "1", "--memory", "8GiB",
            "--flops", "1T", "--bandwidth", "1G", "--price", "0.001"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "coloco node register" in str(result.exception)
    result = runner.invoke(app, [*args[:9], "lots", *args[10:]])
    assert result.exit_code == 1 and "e.g. 50T, 1.5G, 80GiB" in str(result.exception)
    result = runner.invoke(app, [*args[:3], "H200!", *args[4:]])
    assert result.exit_code == 1 and "lowercase letters" in str(result.exception)
    result = runner.invoke(app, ["market", "request", "--devices", "1", "--memory", "1GiB",
                                 "--hours", "1", "--budget", "1"])  # fmt: skip
    assert result.exit_code == 2 and "--min-bandwidth" in result.output
    monkeypatch.setenv("COLOCO_LEDGER_URL", "http://127.0.0.1:9")
    result = runner.invoke(app, ["market", "offers"])
    assert result.exit_code == 1 and "coloco ledger serve" in str(result.exception)
