"""The OpenAPI schema types every uint that can pass 2^53 as integer-or-decimal-string, so that a
JavaScript client generated from it reads `number | string` (JSON.parse rounds a number above
2^53 - 1; the API sends those as decimal strings: ledger.api.errors.WalletSafeJSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ledger.api.errors import WalletSafeJSON
from ledger.core.config import Settings
from ledger.core.schemas import AttestationFields
from ledger.main import create_app

BIG = (1 << 64) - 1  # the vectors' tokens: JSON.parse would read 18446744073709552000


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work: Path = tmp_path_factory.mktemp("openapi")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, environment="test", database_url=f"sqlite:///{work / 'l.db'}",
        blob_dir=work / "blobs", run_background=False, admin_token="openapi-admin-token-0123456789",
    )  # fmt: skip
    return create_app(settings).openapi()


def _field(spec: dict[str, Any], model: str, field: str) -> dict[str, Any]:
    schemas = spec["components"]["schemas"]
    props = schemas[model]["properties"] if model in schemas else schemas[f"{model}-Output"]
    prop: dict[str, Any] = props[field]
    # `X | None` nests the wallet type in an anyOf with null
    branches = [b for b in prop.get("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1 and "anyOf" in branches[0]:
        return branches[0]
    return prop


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("Receipt", "round"), ("Receipt", "claimed_tokens"), ("Receipt", "verified_tokens"),
        ("RoundPublic", "round"), ("AttestationPublic", "tokens"),
        ("AttestationPublic", "round"), ("AttestationPublic", "config_version"),
        ("AttestationPublic", "verified_tokens"), ("NodeOut", "node_id"),
        ("RunInfo", "last_committed"), ("RunInfo", "final_round"),
    ],
)  # fmt: skip
def test_response_uints_are_integer_or_decimal_string(
    spec: dict[str, Any], model: str, field: str
) -> None:
    prop = _field(spec, model, field)
    kinds = {b["type"]: b for b in prop["anyOf"]}
    assert set(kinds) == {"integer", "string"}, prop
    assert kinds["integer"]["maximum"] == (1 << 53) - 1  # a number above it is never sent
    # what the API sends above 2^53 - 1 matches the string branch
    sent = json.loads(WalletSafeJSON({"v": BIG}).body)["v"]
    assert sent == str(BIG) and re.fullmatch(kinds["string"]["pattern"], sent)


def test_request_uints_accept_the_decimal_string_the_schema_promises(spec: dict[str, Any]) -> None:
    prop = _field(spec, "AttestationFields", "tokens")
    kinds = {b["type"]: b for b in prop["anyOf"]}
    assert kinds["integer"]["maximum"] == (1 << 53) - 1  # larger: the decimal string
    assert re.fullmatch(kinds["string"]["pattern"], str(BIG))
    fields = {
        "runId": "0x" + "11" * 32, "round": str(2**63 - 1), "node": "0x" + "22" * 20,
        "configVersion": 1, "baseCheckpoint": "0x" + "33" * 32, "pseudoGradient": "0x" + "44" * 32,
        "dataShard": "0x" + "55" * 32, "innerSteps": 8, "tokens": str(BIG),
        "resultCheckpoint": "0x" + "66" * 32, "traceRoot": "0x" + "67" * 32,
    }  # fmt: skip
    parsed = AttestationFields.model_validate(fields)
    assert parsed.tokens == BIG and parsed.round == 2**63 - 1  # a round: below 2^63 (its column)
