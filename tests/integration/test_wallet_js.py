"""JavaScript wallets sign what the ledger serves: `node --test tests/js/` against a live ledger.

A real `coloco ledger serve` (SQLite, the session's anvil deployment) serves `/v1/eip712`; a
message with uint64 values beyond 2^53 goes out as wallet-safe JSON; MetaMask's eth-sig-util and
ethers (node's test runner) hash and sign it; Python checks the digests agree and recovers both
signatures to the JavaScript wallet's address.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from coloco_cli.demo.net import start_ledger
from coloco_cli.procs import ProcessManager
from protocol.attestation import ComputeAttestation
from protocol.devnet import AnvilProcess
from protocol.eip712 import Eip712Domain
from protocol.signing import recover_digest

ROOT = Path(__file__).resolve().parents[2]
JS_TESTS = ROOT / "tests" / "js"
KEY = "0x" + "4c" * 32


def _node() -> str:
    node = shutil.which("node")
    assert node is not None, "node is part of the toolchain (make setup installs node_modules)"
    assert (ROOT / "node_modules" / "@metamask" / "eth-sig-util").is_dir(), "run `make setup`"
    return node


def test_wallet_vectors_in_node() -> None:
    """The golden vectors, parsed by JSON.parse, hash and sign the same in JS as in Python."""
    out = subprocess.run(
        [_node(), "--test", str(JS_TESTS)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "# fail 0" in out.stdout and "# pass 0" not in out.stdout


def test_wallet_signs_the_ledgers_typed_data(
    anvil: AnvilProcess, deployment: object, tmp_path: Path
) -> None:
    dep_path = tmp_path / "deployment.json"
    deployment.save(dep_path)  # type: ignore[attr-defined]
    with ProcessManager() as procs:
        url, _ = start_ledger(procs, tmp_path, anvil, dep_path, round_deadline_s=60)
        eip712 = httpx.get(f"{url}/v1/eip712", timeout=10).json()
    domain = Eip712Domain.from_json(eip712["domain"])
    node_address = "0x" + "ab" * 20
    from protocol.eip712 import to_checksum_address

    attestation = ComputeAttestation(
        run_id=bytes.fromhex("11" * 32),
        round=2**53 + 1,
        node=to_checksum_address(node_address),
        config_version=3,
        base_checkpoint=bytes.fromhex("22" * 32),
        pseudo_gradient=bytes.fromhex("33" * 32),
        data_shard=bytes.fromhex("44" * 32),
        inner_steps=500,
        tokens=2**64 - 1,
        result_checkpoint=bytes.fromhex("55" * 32),
        trace_root=bytes.fromhex("66" * 32),
    )
    message = attestation.to_json()
    assert message["tokens"] == str(2**64 - 1)  # wallet-safe on the way out
    digest = attestation.digest(domain)
    fixture = tmp_path / "fixture.json"
    fixture.write_text(
        json.dumps(
            {
                "eip712": eip712,
                "message": message,
                "python_digest": "0x" + digest.hex(),
                "private_key": KEY,
            }
        )
    )
    result = tmp_path / "signatures.json"
    env = {**os.environ, "COLOCO_WALLET_FIXTURE": str(fixture), "COLOCO_WALLET_OUT": str(result)}
    out = subprocess.run(
        [_node(), "--test", str(JS_TESTS)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    signed = json.loads(result.read_text())
    from eth_account import Account

    expected = Account.from_key(KEY).address
    assert signed["signer"] == expected
    for lib in ("metamask", "ethers"):
        assert signed[lib]["digest"] == "0x" + digest.hex()
        assert recover_digest(digest, bytes.fromhex(signed[lib]["signature"][2:])) == expected
    # and what JavaScript sends back (decimal strings) parses to the same attestation
    assert ComputeAttestation.from_json(json.loads(json.dumps(message))) == attestation


@pytest.mark.parametrize("text", ["18446744073709551615", "9007199254740993"])
def test_wallet_decimal_strings_parse_exactly(text: str) -> None:
    """A value JavaScript would round (2^53 + 1) is read exactly from its decimal string."""
    from protocol.eip712 import parse_uint

    assert parse_uint("tokens", text, 64) == int(text)
    assert float(int(text)) != int(text) or int(text) < 2**53
