"""The fast path (ledger.api.fast_path) answers exactly as the FastAPI routes it bypasses.

``application/json`` bodies take the fast path; ``application/x-test+json`` (JSON too, for
FastAPI) goes through the routes. The same requests must get the same status, error code and
body shape either way, and the request id and body limit still apply.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, attestation, h
from ledger.api import fast_path
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body

FAST, ROUTED = "application/json", "application/x-test+json"


def _answers(client: TestClient, path: str, payload: bytes) -> list[tuple[int, object]]:
    out = []
    for kind in (FAST, ROUTED):
        r = client.post(path, content=payload, headers={"content-type": kind})
        data = r.json()
        if isinstance(data, dict) and "error" in data:
            data = data["error"]["code"]
        out.append((r.status_code, data))
    return out


def test_fast_and_routed_answers_match(
    client: TestClient,
    started_run: str,
    nodes: list[NodeKey],
    domain: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: list[str] = []
    for path, (model, handler) in list(fast_path._ROUTES.items()):

        async def counted(ledger: Any, item: Any, _h: Any = handler, _p: str = path) -> Any:
            taken.append(_p)
            return await _h(ledger, item)

        monkeypatch.setitem(fast_path._ROUTES, path, (model, counted))
    good = body(
        attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("r")),
        nodes[0].key,
        domain,  # type: ignore[arg-type]
    )
    bad_sig = {**good, "signature": "0x" + "11" * 65}
    unknown_field = {**good, "extra": 1}
    cases = {
        "accepted (then the same id again)": ("/v1/attestations", orjson.dumps(good)),
        "bad signature": ("/v1/attestations", orjson.dumps(bad_sig)),
        "unknown field": ("/v1/attestations", orjson.dumps(unknown_field)),
        "malformed JSON": ("/v1/attestations", b'{"attestation": '),
        "NaN": ("/v1/attestations", b'{"attestation": NaN}'),
        "empty body": ("/v1/attestations", b""),
        "batch": ("/v1/attestations/batch", orjson.dumps({"items": [good, bad_sig]})),
        "empty batch": ("/v1/attestations/batch", orjson.dumps({"items": []})),
    }
    for name, (path, payload) in cases.items():
        fast, routed = _answers(client, path, payload)
        assert fast == routed, (name, fast, routed)
    # the valid bodies (parsed) took the fast path once each, never the routed requests
    assert taken == ["/v1/attestations"] * 2 + ["/v1/attestations/batch"], taken
    first = client.post(
        "/v1/attestations", content=orjson.dumps(good), headers={"content-type": FAST}
    )
    assert first.status_code == 202 and first.json()["status"] == "accepted"
    assert first.headers["x-request-id"]
    r = client.post(
        "/v1/attestations",
        content=orjson.dumps(good),
        headers={"content-type": "application/json; charset=utf-8", "x-request-id": "req-42"},
    )
    assert r.status_code == 202 and r.json()["id"] == first.json()["id"]
    assert r.headers["x-request-id"] == "req-42"


def test_the_body_limit_holds_on_the_fast_path(client: TestClient) -> None:
    big = b'{"items": [' + b'"x",' * 400_000 + b'"x"]}'  # over the 1 MiB default
    r = client.post("/v1/attestations/batch", content=big, headers={"content-type": FAST})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    # sent chunked, without a Content-Length: counted while it is read
    r = client.post("/v1/attestations/batch", content=iter([big]), headers={"content-type": FAST})
    assert "content-length" not in r.request.headers
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_polled_reads_fast_and_routed_match(
    client: TestClient,
    started_run: str,
    nodes: list[NodeKey],
    domain: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GET a run's rounds, a node, a payout's rewards: a well-formed request takes the fast
    path, any other form goes to FastAPI (an unknown query parameter, which FastAPI ignores,
    forces it here); both answer the same bytes, and FastAPI still answers the malformed ones."""
    for node in nodes[:2]:
        att = attestation(node, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
        assert client.post("/v1/attestations", json=body(att, node.key, domain)).status_code == 202  # type: ignore[arg-type]
    late = attestation(nodes[0], run_id=started_run, round_=10**6, base=GENESIS, result=h("r"))
    refused = client.post("/v1/attestations", json=body(late, nodes[0].key, domain))  # type: ignore[arg-type]
    assert refused.status_code >= 400, refused.text  # signed: recorded under the node
    taken: list[tuple[str, int]] = []
    real = fast_path._read

    def counted(ledger: Any, handler: Any, key: str, limit: int) -> Any:
        taken.append((key, limit))
        return real(ledger, handler, key, limit)

    monkeypatch.setattr(fast_path, "_read", counted)
    reads = {  # path: (the default limit, the largest)
        f"/v1/runs/{started_run}/rounds": (50, 500),
        f"/v1/nodes/{nodes[0].address}": (100, 1000),
        f"/v1/rewards/{nodes[0].payout}": (100, 1000),
        f"/v1/nodes/{nodes[1].address.lower()}": (100, 1000),
    }
    for base, (default, most) in reads.items():
        taken.clear()
        for query in ("", "?limit=1", f"?limit={most}"):
            fast = client.get(base + query)
            routed = client.get(base + query + ("&" if query else "?") + "via=fastapi")
            assert fast.status_code == routed.status_code == 200, (base, query, fast.text)
            assert fast.content == routed.content, base
            assert fast.headers["x-request-id"]
        assert [limit for _, limit in taken] == [default, 1, most], (base, taken)
        for bad in ("?limit=0", f"?limit={most + 1}", "?limit=x"):
            r = client.get(base + bad)
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_field", bad
        assert len(taken) == 3, base  # none of the malformed requests took the fast path
    rounds = client.get(f"/v1/runs/{started_run}/rounds").json()
    assert rounds[0]["members"] == sorted(n.address for n in nodes[:2])
    assert rounds[0]["opened_at"].endswith("Z") and rounds[0]["scores"][0]["received_at"][-1] == "Z"
    node = client.get(f"/v1/nodes/{nodes[0].address}").json()
    assert [r["round"] for r in node["rounds"]] == [1] and node["rejections"][0]["at"][-1] == "Z"
    rewards = client.get(f"/v1/rewards/{nodes[0].payout}").json()
    assert [(r["round"], r["node"]) for r in rewards["receipts"]] == [(1, nodes[0].address)]
    assert client.get(f"/v1/runs/0x{'1' * 63}/rounds").status_code == 422
    assert client.get(f"/v1/nodes/0x{'1' * 39}").status_code == 422
