"""A run keeps the name it was opened with, and only its own: sha256(name) must be the id."""

from __future__ import annotations

from fastapi.testclient import TestClient

from protocol.runs import run_id_of_name
from tests.ledger.conftest import ADMIN, GENESIS

AUTH = {"Authorization": f"Bearer {ADMIN}"}


def test_the_ledger_keeps_a_run_name_that_hashes_to_its_id(client: TestClient) -> None:
    run_id = "0x" + run_id_of_name("demo-name-test").hex()
    wrong = client.post(
        "/v1/runs",
        json={"run_id": run_id, "genesis_checkpoint": GENESIS, "name": "another-name"},
        headers=AUTH,
    )
    assert wrong.status_code == 409, wrong.text  # the schema allows it; the run's id does not
    assert "another-name" in wrong.text and "sha256" in wrong.text
    assert client.get("/?format=json").json()["runs"] == []  # nothing stored for the refusal
    hexlike = client.post(
        "/v1/runs", json={"run_id": run_id, "genesis_checkpoint": GENESIS, "name": "0x12"},
        headers=AUTH,
    )  # fmt: skip
    assert hexlike.status_code == 422, hexlike.text
    ok = client.post(
        "/v1/runs",
        json={"run_id": run_id, "genesis_checkpoint": GENESIS, "name": "demo-name-test"},
        headers=AUTH,
    )
    assert ok.status_code == 201, ok.text
    (run,) = client.get("/?format=json").json()["runs"]
    assert run["run_id"] == run_id and run["name"] == "demo-name-test"
    page = client.get("/").text
    assert ">demo-name-test</a>" in page and run_id[:10] in page
    assert client.get("/runs/demo-name-test?format=json").json()["name"] == "demo-name-test"
