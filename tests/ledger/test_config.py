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


@pytest.mark.parametrize("fraction", [0.02, 0.05, 0.1, 0.5])
@pytest.mark.parametrize("slash_bps", [1, 100, 450, 1000, 10_000])
def test_settings_where_skipping_steps_pays_are_refused(fraction: float, slash_bps: int) -> None:
    """Accepted settings make every step-skipping cheat a loss (the whole round skipped, a
    whole segment, one step of H = 50 in segments of 5); refused ones would let it pay."""
    from reference.audit_economics import (
        deterrence,
        skip_one_net_gain,
        slash_in_round_rewards,
    )

    kw = {"environment": "development", "audit_fraction": fraction, "slash_bps": slash_bps}
    slash = slash_in_round_rewards(slash_bps, 200.0)
    whole_round_gain = 1.0 - fraction * (1.0 + slash)  # caught whenever the round is audited
    if whole_round_gain >= 0:
        with pytest.raises(ConfigError, match="cheating pays"):
            make(**kw, stake_in_round_rewards=200.0)
        return
    settings = make(**kw, stake_in_round_rewards=200.0)
    assert deterrence(settings.audit_fraction, slash) > 1
    assert skip_one_net_gain(50, 5, settings.audit_segments, fraction, slash) < 0


def test_the_audit_turned_off_is_not_an_economics_error() -> None:
    assert make(environment="development", audit_fraction=0.0, slash_bps=1).audit_fraction == 0
