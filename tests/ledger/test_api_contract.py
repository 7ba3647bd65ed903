"""The API's contract, point by point (tests/ledger/test_schema.py fuzzes the whole of it):
each bound the schema states is the one the server enforces, on both sides of it; a refusal
of the request's shape is the whole batch's; an undeclared method answers 405 with every
method the path serves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter, ValidationError

from ledger.api.routes.membership import JoinFields
from ledger.core.config import Settings
from ledger.core.schemas import (
    JS_SAFE_MAX,
    AttestationFields,
    DomainIn,
    RunCloseIn,
    RunIn,
    decimal_pattern,
)
from ledger.main import create_app

BIG = (1 << 64) - 1
MODELS: dict[str, Any] = {
    m.__name__: m for m in (AttestationFields, DomainIn, JoinFields, RunCloseIn, RunIn)
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The app, not started: what is answered before any part of the service is asked."""
    work: Path = tmp_path_factory.mktemp("contract")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, environment="test", database_url=f"sqlite:///{work / 'l.db'}",
        blob_dir=work / "blobs", run_background=False, admin_token="contract-admin-0123456789",
    )  # fmt: skip
    return create_app(settings)


@pytest.fixture(scope="module")
def spec(app: Any) -> dict[str, Any]:
    return app.openapi()  # type: ignore[no-any-return]


def _property(spec: dict[str, Any], model: str, field: str) -> dict[str, Any]:
    prop: dict[str, Any] = spec["components"]["schemas"][model]["properties"][field]
    return prop


PROBES: list[object] = [
    -1, 0, 1, 1.0, 1.5, True, None, 2**32 - 1, 2**32, JS_SAFE_MAX, JS_SAFE_MAX + 1, float(2**60),
    BIG, "0", "01", "-1", " 1", "1.0", str(2**32 - 1), str(2**32), str(2**63 - 1), str(2**63),
    str(BIG), str(BIG + 1),
    str(2**256 - 1), str(2**256),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("AttestationFields", "round"), ("AttestationFields", "tokens"),
        ("AttestationFields", "innerSteps"), ("AttestationFields", "configVersion"),
        ("DomainIn", "chainId"), ("JoinFields", "round"), ("RunCloseIn", "final_round"),
    ],
)  # fmt: skip
def test_each_request_uint_is_what_its_schema_says(
    spec: dict[str, Any], model: str, field: str
) -> None:
    """Every probe the schema allows the server accepts, every one it forbids it refuses
    (negative innerSteps, 1.5, a number above 2^53 - 1, a string above the type's maximum)."""
    schema = _property(spec, model, field)
    validator = jsonschema_rs.validator_for(schema)
    info = MODELS[model].model_fields[field]
    kind: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    server: TypeAdapter[Any] = TypeAdapter(kind)
    for value in PROBES:
        allowed = validator.is_valid(value)
        try:
            server.validate_python(value, strict=True)
            accepted = True
        except ValidationError:
            accepted = False
        assert allowed == accepted, (model, field, value, "schema", allowed, "server", accepted)


def test_decimal_pattern_is_exact_at_its_bound() -> None:
    import re

    for most in (9, 10, 255, 2**32 - 1, BIG, 2**256 - 1):
        pattern = re.compile(decimal_pattern(most))
        for value in (0, 1, most // 2, most - 1, most, most + 1, most * 10, 10 ** len(str(most))):
            assert bool(pattern.fullmatch(str(value))) == (value <= most), (most, value)
        assert not pattern.fullmatch("0" + str(most)) and not pattern.fullmatch("")
    positive = re.compile(decimal_pattern(2**32 - 1, least=1))
    assert not positive.fullmatch("0") and positive.fullmatch("1") and positive.fullmatch("10")


def test_zero_genesis_is_refused_by_schema_and_server(spec: dict[str, Any]) -> None:
    validator = jsonschema_rs.validator_for(_property(spec, "RunIn", "genesis_checkpoint"))
    for value, ok in (("0x" + "00" * 32, False), ("0x" + "00" * 31 + "01", True)):
        assert validator.is_valid(value) is ok
        body = {"run_id": "0x" + "11" * 32, "genesis_checkpoint": value}
        if ok:
            RunIn.model_validate(body)
        else:
            with pytest.raises(ValidationError, match="must not be zero"):
                RunIn.model_validate(body)


def test_a_batch_item_out_of_range_refuses_the_whole_batch(app: Any) -> None:
    """chainId above the schema's maximum (a string above 2^256 - 1, a number above 2^53 - 1):
    422 for the batch, not 202 with a per-item refusal."""
    item = {
        "attestation": {
            "runId": "0x" + "11" * 32, "round": 1, "node": "0x" + "22" * 20, "configVersion": 1,
            "baseCheckpoint": "0x" + "33" * 32, "pseudoGradient": "0x" + "44" * 32,
            "dataShard": "0x" + "55" * 32, "innerSteps": 8, "tokens": 100,
            "resultCheckpoint": "0x" + "66" * 32, "traceRoot": "0x" + "67" * 32,
        },
        "signature": "0x" + "77" * 65,
    }  # fmt: skip
    client = TestClient(app)  # not started: the shape is refused before the service is asked
    for chain_id in (str(2**256), JS_SAFE_MAX + 1):
        bad = {**item, "domain": {"chainId": chain_id, "verifyingContract": "0x" + "88" * 20}}
        r = client.post("/v1/attestations/batch", json={"items": [item, bad]})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "invalid_field"
        assert "items.1.domain.chainId" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("TRACE", "/v1/blobs/0x" + "ab" * 32, "GET, PUT"),  # two routes, one path
        ("DELETE", "/v1/attestations", "POST"),
        ("PATCH", "/v1/runs/0x" + "ab" * 32, "GET"),
        ("PUT", "/v1/runs", "POST"),
    ],
)
def test_an_undeclared_method_answers_405_with_every_allowed_method(
    app: Any, method: str, path: str, allow: str
) -> None:
    r = TestClient(app).request(method, path)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allow
    assert r.json()["error"]["code"] == "method_not_allowed"
    assert allow in r.json()["error"]["message"]


def test_the_admin_routes_declare_their_bearer_scheme(spec: dict[str, Any]) -> None:
    assert spec["components"]["securitySchemes"]["admin"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "COLOCO_LEDGER_ADMIN_TOKEN, as `Authorization: Bearer <token>`",
    }
    admin = {("/v1/runs", "post"), ("/v1/runs/{run_id}/close", "post"),
             ("/v1/boundaries/requests", "post")}  # fmt: skip
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert (op.get("security") == [{"admin": []}]) == ((path, method) in admin), path
            if (path, method) in admin:
                assert "401" in op["responses"]


@pytest.mark.parametrize(
    "path", ["/v1/attestations", "/v1/attestations/batch", "/v1/joins", "/v1/runs"]
)
def test_a_json_body_sent_as_another_media_type_answers_415(app: Any, path: str) -> None:
    r = TestClient(app).post(path, content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 415, r.text
    assert r.json()["error"]["code"] == "unsupported_media_type"
    assert "application/json" in r.json()["error"]["message"]


def test_a_join_of_a_round_beyond_the_ledgers_range_is_refused_not_a_500(
    client: TestClient, started_run: str
) -> None:
    """A join's round is looked up in the database: 2^63 and above (a uint64 the database cannot
    hold) is refused by its shape (422), not an overflow (500); 2^63 - 1 gets to the checks."""
    join = {"runId": started_run, "node": "0x2941eb9795dE445989721dd827084db576C933CF"}
    for round_, status in ((str(2**63), 422), (str(2**64 - 1), 422), (str(2**63 - 1), 403)):
        r = client.post("/v1/joins", json={"join": {**join, "round": round_}, "signature": "0x00"})
        assert r.status_code == status, (round_, r.text)
        if status == 422:
            assert "join.round" in r.json()["error"]["message"]
