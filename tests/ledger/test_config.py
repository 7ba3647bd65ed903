"""Settings: secrets required and unsafe values refused outside development."""

from __future__ import annotations

from pathlib import Path

import pytest
from eth_account import Account
from pydantic import ValidationError

from ledger.core.config import Settings
from ledger.core.db import normalize_url
from protocol.errors import ConfigError


def make(**kw: object) -> Settings:
    return Settings(_env_file=None, **kw)  # type: ignore[arg-type]


def test_production_is_the_default_and_refuses_development_secrets() -> None:
    with pytest.raises((ConfigError, ValidationError), match="development token"):
        make()
    with pytest.raises((ConfigError, ValidationError), match="COMMITTER_KEYSTORE"):
        make(admin_token="x" * 32)


def test_development_must_be_asked_for() -> None:
    s = make(environment="development")
    assert s.database_url.startswith("sqlite")
    assert s.committer_key() is None


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"environment": "production"}, "development token"),
        ({"environment": "test", "admin_token": "short"}, "at least 16"),
        (
            {
                "environment": "production",
                "admin_token": "x" * 32,
                "committer_private_key": "0x" + "11" * 32,
            },
            "development only",
        ),
        ({"environment": "production", "admin_token": "x" * 32}, "COMMITTER_KEYSTORE"),
    ],
)
def test_unsafe_values_refused(kw: dict[str, object], fragment: str) -> None:
    with pytest.raises((ConfigError, ValidationError), match=fragment):
        make(**kw)


def test_unknown_setting_refused() -> None:
    with pytest.raises(ValidationError):
        make(no_such_setting=1)


def test_keystore_is_decrypted(tmp_path: Path) -> None:
    key = bytes(range(1, 33))
    keystore = Account.encrypt(key, "pw", kdf="pbkdf2", iterations=2)
    import json

    (tmp_path / "ks.json").write_text(json.dumps(keystore))
    (tmp_path / "pw").write_text("pw\n")
    s = make(
        environment="production",
        admin_token="y" * 32,
        committer_keystore=tmp_path / "ks.json",
        committer_password_file=tmp_path / "pw",
    )
    assert s.committer_key() == key
    (tmp_path / "pw").write_text("wrong")
    with pytest.raises(ConfigError, match="cannot decrypt"):
        s.committer_key()


def test_database_urls() -> None:
    assert normalize_url("postgresql://u@h:1/d") == "postgresql+psycopg://u@h:1/d"
    assert normalize_url("sqlite:///x.db") == "sqlite:///x.db"
    with pytest.raises(ConfigError, match="unsupported database URL"):
        normalize_url("mysql://u@h/d")
