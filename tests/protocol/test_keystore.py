"""Node keys: encrypted keystores, password sources, hidden private key, `coloco keys`."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.keys.cli import app
from protocol.errors import EncodingError, KeystoreError
from protocol.keys import (
    PASSWORD_ENV,
    NodeKey,
    create_keystore,
    keystore_info,
    load_keystore_account,
    load_node_key,
    read_password,
)
from protocol.types import Address
from tests.protocol.conftest import make_attestation
from tests.vectors.generate import vector_address, vector_key

PAYOUT = vector_address("cold payout")


def test_create_then_load(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    created = create_keystore(path, "s3cret", payout=PAYOUT, light=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["version"] == 3 and data["coloco"] == {"payout": PAYOUT}
    assert keystore_info(path) == (created.address, PAYOUT)
    loaded = load_node_key(path, "s3cret")
    assert loaded == created and loaded.private_key == created.private_key
    assert Account.decrypt(data, "s3cret") == loaded.private_key  # any wallet can read it


def test_given_key_and_pbkdf2(tmp_path: Path) -> None:
    key = vector_key("keystore/given")
    made = create_keystore(tmp_path / "k.json", "pw", private_key=key, kdf="pbkdf2", light=True)
    assert made.address == Account.from_key(key).address
    assert load_node_key(tmp_path / "k.json", "pw").payout is None


def test_private_key_never_in_repr_str_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = create_keystore(tmp_path / "k.json", "pw", light=True)
    loaded = load_node_key(tmp_path / "k.json", "pw")
    secret = key.private_key.hex()
    for text in (repr(key), str(loaded), f"{loaded}", caplog.text):
        assert secret not in text
        assert secret.upper() not in text
    assert "hidden" in repr(key)


def test_wrong_password_missing_and_garbage_files(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    create_keystore(path, "right", light=True)
    with pytest.raises(KeystoreError, match="wrong password"):
        load_node_key(path, "wrong")
    with pytest.raises(KeystoreError, match="not found; create one with `coloco keys new`"):
        load_node_key(tmp_path / "nope.json", "x")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(KeystoreError, match="not a readable JSON"):
        load_node_key(tmp_path / "bad.json", "x")
    (tmp_path / "plain.json").write_text('{"address": "00"}')
    with pytest.raises(KeystoreError, match="no 'crypto' section"):
        load_node_key(tmp_path / "plain.json", "x")


def test_refuses_overwrite_empty_password_and_bad_payout(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    create_keystore(path, "pw", light=True)
    with pytest.raises(KeystoreError, match="already exists"):
        create_keystore(path, "pw", light=True)
    path.chmod(0o644)
    replaced = create_keystore(path, "pw2", light=True, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_node_key(path, "pw2") == replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json"]
    with pytest.raises(KeystoreError, match="empty keystore password"):
        create_keystore(tmp_path / "e.json", "", light=True)
    with pytest.raises(EncodingError, match=r"payout: .* not EIP-55"):
        create_keystore(tmp_path / "p.json", "pw", payout=Address(PAYOUT.lower()), light=True)


def test_password_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pw_file = tmp_path / "pw.txt"
    pw_file.write_text("from-file\n")
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert read_password(password_file=pw_file) == "from-file"
    assert read_password() == "from-env"
    monkeypatch.setenv("MY_PW", "custom")
    assert read_password(password_env="MY_PW") == "custom"
    monkeypatch.delenv(PASSWORD_ENV)
    with pytest.raises(KeystoreError, match="no keystore password"):
        read_password(prompt=False)
    with pytest.raises(KeystoreError, match="OTHER_PW is not set"):
        read_password(password_env="OTHER_PW")
    with pytest.raises(KeystoreError, match="cannot read it"):
        read_password(password_file=tmp_path / "missing.txt")


def test_load_keystore_account_signs_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = create_keystore(tmp_path / "k.json", "pw", light=True)
    monkeypatch.setenv(PASSWORD_ENV, "pw")
    account = load_keystore_account(tmp_path / "k.json", prompt=False)
    assert account.address == made.address


def test_node_key_signs_only_its_own_attestations(tmp_path: Path) -> None:
    from protocol.eip712 import Eip712Domain
    from protocol.signing import verify_attestation

    key = NodeKey.from_private_key(vector_key("node-key/sign"))
    domain = Eip712Domain(31337, vector_address("ledger"))
    att = make_attestation(node=key.address)
    assert verify_attestation(att, domain, key.sign_attestation(att, domain)) == key.address
    with pytest.raises(KeystoreError, match="a node signs only its own attestations"):
        key.sign_attestation(make_attestation(node=vector_address("other")), domain)


def test_cli_new_and_show(tmp_path: Path) -> None:
    runner = CliRunner()
    pw = tmp_path / "pw.txt"
    pw.write_text("pw\n")
    out = tmp_path / "node.json"
    env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}
    result = runner.invoke(
        app,
        [
            "new",
            "--out",
            str(out),
            "--payout",
            PAYOUT,
            "--password-file",
            str(pw),
            "--light-kdf",
            "--json",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    created = json.loads(result.output)
    assert created["payout"] == PAYOUT
    assert load_node_key(out, "pw").address == created["address"]
    shown = runner.invoke(
        app, ["show", str(out), "--check", "--password-file", str(pw), "--json"], env=env
    )
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == {
        "address": created["address"],
        "payout": PAYOUT,
        "decrypted": True,
    }
    again = runner.invoke(
        app, ["new", "--out", str(out), "--password-file", str(pw), "--light-kdf"], env=env
    )
    assert again.exit_code != 0
    assert isinstance(again.exception, KeystoreError)
    # lowercase is accepted (as `node register --payout` does) and stored checksummed
    low = runner.invoke(app, ["new", "--out", str(tmp_path / "x.json"), "--payout",
                              PAYOUT.lower(), "--password-file", str(pw), "--light-kdf", "--json"],
                        env=env)  # fmt: skip
    assert low.exit_code == 0, low.output
    assert json.loads(low.output)["payout"] == PAYOUT
    # a mixed-case address with a wrong checksum is a typo: refused as a usage error
    typo = PAYOUT[:2] + PAYOUT[2:].swapcase()
    bad = runner.invoke(app, ["new", "--out", str(tmp_path / "y.json"), "--payout", typo,
                              "--password-file", str(pw), "--light-kdf"], env=env)  # fmt: skip
    assert bad.exit_code == 2 and "EIP-55" in bad.output
