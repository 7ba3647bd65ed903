"""Secrets never leave the ledger: an RPC URL with a provider key is in no log line and no body."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import h
from ledger.chain.client import LedgerChain
from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from protocol.chain import RetryPolicy
from protocol.devnet import AnvilProcess
from tests.ledger.conftest import ADMIN, GENESIS

PROVIDER_KEY = "pk-live-0123456789abcdef"


def test_rpc_url_and_keys_are_never_logged_or_returned(
    settings_for: Callable[..., Settings],
    sqlite_url: str,
    chain: AnvilProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    host = chain.rpc_url.split("://", 1)[1]
    secret_url = f"http://user:{PROVIDER_KEY}@{host}"  # anvil ignores the credentials
    settings = settings_for(sqlite_url, rpc_url=secret_url)
    door = LedgerChain(
        secret_url, settings.deployment, settings.committer_key(), retry=RetryPolicy(attempts=1)
    )
    ledger = Ledger(settings, chain=door)
    bodies: list[str] = []
    try:
        with TestClient(create_app(ledger=ledger)) as client:
            # the provider goes away: every chain error now names the URL with its key
            dead = f"http://user:{PROVIDER_KEY}@127.0.0.1:9/"
            door.client.w3.provider.endpoint_uri = dead  # type: ignore[attr-defined]
            door.client.rpc_url = dead
            ledger.tick()
            assert "step index" in ledger.problems()
            for path in ("/v1/health", "/v1/health/ready", "/v1/health/live", "/v1/eip712"):
                bodies.append(client.get(path).text)
            r = client.post(
                "/v1/runs",
                json={"run_id": h("run-secret"), "genesis_checkpoint": GENESIS},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 503, r.text
            bodies.append(r.text)
            bodies.append(client.get("/openapi.json").text)
    finally:
        ledger.stop()
    assert any("<redacted>" in b for b in bodies)
    for text in [*bodies, caplog.text]:
        assert PROVIDER_KEY not in text
        assert ADMIN not in text
        assert settings.committer_private_key is not None
        assert settings.committer_private_key.get_secret_value().removeprefix("0x") not in text


def test_keystore_keys_and_password_files_cannot_reach_a_log_line(
    settings_for: Callable[..., Settings],
    sqlite_url: str,
    chain: AnvilProcess,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """F18 (first half): the keys a ledger decrypts from its keystores and the passwords it reads
    from their files are redacted like the raw keys: a real Ledger built from keystores, then any
    log line (a library echoing a key, a traceback) naming them shows ``<redacted>``."""
    from eth_account import Account

    caplog.set_level(logging.DEBUG)
    files: dict[str, Path] = {}
    secrets_in_use: list[str] = []
    for role, (_, key) in (("committer", chain.accounts[1]), ("slasher", chain.accounts[5])):
        password = f"{role}-pass-phrase-0123"
        keystore = Account.encrypt(key, password, kdf="pbkdf2", iterations=2)
        files[f"{role}_keystore"] = tmp_path / f"{role}.json"
        files[f"{role}_keystore"].write_text(json.dumps(keystore), encoding="utf-8")
        files[f"{role}_password_file"] = tmp_path / f"{role}.pass"
        files[f"{role}_password_file"].write_text(password + "\n", encoding="utf-8")
        raw = key.removeprefix("0x")
        secrets_in_use += [password, raw, "0x" + raw]
    settings = settings_for(sqlite_url, committer_private_key=None, **files)
    ledger = Ledger(settings)
    try:
        assert ledger.settings.slasher_key() is not None  # decrypted like the committer's
        log = logging.getLogger("ledger.test")
        for secret in secrets_in_use:
            log.warning("a library echoed %s", secret)
        try:
            raise RuntimeError(f"signing failed with {secrets_in_use[1]}")
        except RuntimeError:
            log.exception("traceback")
    finally:
        ledger.stop()
    assert caplog.text.count("<redacted>") >= len(secrets_in_use) + 1
    for secret in secrets_in_use:
        assert secret not in caplog.text, secret
