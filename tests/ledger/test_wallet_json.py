"""Wallet-safe JSON at the ledger's API: integers beyond 2^53 - 1 leave as decimal strings (a
JavaScript wallet's JSON.parse would round them) and come in as decimal strings too."""

from __future__ import annotations

import json

import orjson
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, attestation, h
from ledger.api.errors import WalletSafeJSON
from protocol.eip712 import JS_SAFE_MAX
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body

BIG = JS_SAFE_MAX + 2  # 2^53 + 1: the first integer a JavaScript number cannot hold


def test_response_class_writes_big_integers_as_strings() -> None:
    content = {"a": BIG, "b": [JS_SAFE_MAX, -BIG, True, 1.5], "c": {"d": 2**64 - 1}}
    out = orjson.loads(WalletSafeJSON(content).body)
    want = {"a": str(BIG), "b": [JS_SAFE_MAX, str(-BIG), True, 1.5], "c": {"d": str(2**64 - 1)}}
    assert out == want


def test_big_tokens_go_in_and_out_as_decimal_strings(
    client: TestClient, started_run: str, nodes: list[NodeKey], domain
) -> None:  # type: ignore[no-untyped-def]
    att = attestation(
        nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("r1"), tokens=BIG
    )
    payload = body(att, nodes[0].key, domain)
    assert payload["attestation"]["tokens"] == str(BIG)  # what a node (and ethers) sends
    r = client.post("/v1/attestations", json=payload)
    assert r.status_code == 202, r.text
    rnd = client.get(f"/v1/runs/{started_run}/rounds/1")
    assert rnd.status_code == 200
    score = rnd.json()["scores"][0]
    assert score["tokens"] == str(BIG) and score["round"] == 1  # small ones stay numbers
    assert f'"tokens":"{BIG}"' in rnd.text
    # the list route and the raw text too: no bare integer above 2^53 anywhere
    listed = client.get(f"/v1/runs/{started_run}/rounds").text
    assert str(BIG) in listed and f":{BIG}" not in listed
    # a JSON number above 2^53 - 1 is refused, naming the string to send (the schema's integer
    # maximum is 2^53 - 1: tests/ledger/test_schema.py); the same value as a string passes
    as_number = json.loads(json.dumps(payload))
    as_number["attestation"]["tokens"] = BIG
    refused = client.post("/v1/attestations", json=as_number)
    assert refused.status_code == 422, refused.text
    assert f'send {BIG} as the decimal string \\"{BIG}\\"' in refused.text
    # JSON Schema's integer 1.0 is the integer 1: the same attestation, the same id
    as_float = json.loads(json.dumps(payload))
    as_float["attestation"]["round"] = 1.0
    again = client.post("/v1/attestations", json=as_float)
    assert again.status_code == 202 and again.json()["id"] == r.json()["id"], again.text


def test_response_class_edges_of_the_safe_range() -> None:
    """The fast path (orjson's own 53-bit check) and the walk agree at the bounds; keys that
    are not strings still come out as strings."""
    for value in (JS_SAFE_MAX, -JS_SAFE_MAX, 0, True, False):
        assert orjson.loads(WalletSafeJSON({"v": [value]}).body) == {"v": [value]}
    for value in (JS_SAFE_MAX + 1, -JS_SAFE_MAX - 1, 2**255):
        assert orjson.loads(WalletSafeJSON({"v": (value,)}).body) == {"v": [str(value)]}
    assert orjson.loads(WalletSafeJSON({1: "a", "n": 2**60}).body) == {"1": "a", "n": str(2**60)}
    assert orjson.loads(WalletSafeJSON({1: "a"}).body) == {"1": "a"}
