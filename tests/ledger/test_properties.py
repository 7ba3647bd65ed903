"""Property tests: generated bad input gets a clear 4xx, nothing is stored, service serves on."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import Session, func, select

from bench.harness.nodes import attestation, h
from ledger.core.models import Attestation
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=15,
)
FIELDS = ("runId", "round", "node", "configVersion", "baseCheckpoint", "pseudoGradient",
          "dataShard", "innerSteps", "tokens", "resultCheckpoint", "traceRoot")  # fmt: skip


def _stored(ledger: Any) -> int:
    with Session(ledger.engine) as s:
        return int(s.exec(select(func.count()).select_from(Attestation)).one())


def _post(client: Any, path: str, payload: Any) -> Any:
    """Post as the JSON Python writes (NaN and Infinity included: they must be refused too)."""
    return client.post(
        path, content=json.dumps(payload), headers={"content-type": "application/json"}
    )


def _assert_clear_4xx(response: Any) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error = response.json()["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]


@SETTINGS
@given(payload=json_values)
def test_arbitrary_json_is_refused(client, ledger, started_run, payload) -> None:
    _assert_clear_4xx(_post(client, "/v1/attestations", payload))
    _assert_clear_4xx(_post(client, "/v1/attestations/batch", payload))
    assert _stored(ledger) == 0


@SETTINGS
@given(raw=st.binary(max_size=300))
def test_arbitrary_bytes_are_refused(client, ledger, started_run, raw) -> None:
    r = client.post("/v1/attestations", content=raw, headers={"content-type": "application/json"})
    _assert_clear_4xx(r)
    assert _stored(ledger) == 0


@SETTINGS
@given(field=st.sampled_from(FIELDS), value=json_values, sig=st.binary(max_size=80))
def test_mutated_attestations_are_refused(
    client, ledger, started_run, nodes, domain, field, value, sig
) -> None:
    att = attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("r"))
    good = body(att, nodes[0].key, domain)
    if value != good["attestation"][field]:
        mutated = {**good, "attestation": {**good["attestation"], field: value}}
        _assert_clear_4xx(_post(client, "/v1/attestations", mutated))
    forged = {**good, "signature": "0x" + sig.hex()}
    _assert_clear_4xx(client.post("/v1/attestations", json=forged))
    assert _stored(ledger) == 0
    assert client.get("/v1/health").status_code == 200
