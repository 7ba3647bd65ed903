"""A failed segment bisected through the real ledger and the node's own answers: the ledger asks
for the states inside the segment (boundary requests with ``at_step``), the node recomputes them
from its kept boundary and uploads them signed (trainer.round.boundaries.answer_requests), the
bisection (stored in the database, ledger.judge.bisect) names the cheater's skipped step, and
``coloco audit <fraud id>`` re-checks it in one step against the served ledger (docs/cli.md's
``<!-- verdict -->`` block); an honest node's last step holds."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from sqlmodel import Session, select
from typer.testing import CliRunner

from bench.harness.nodes import NodeKey, attestation, h
from coloco_cli.main import app
from ledger.core.models import BoundaryRequest, FraudRecord, SegmentBisection
from ledger.intake import boundaries as intake
from ledger.judge.bisect import advance_bisections, bisect_failed_segment
from ledger.service import Ledger
from protocol.blob_auth import UploadSigner
from protocol.eip712 import Eip712Domain
from reference.inner import InnerConfig
from reference.model import GPT, GPTConfig
from reference.segment import STEP, fresh_state
from reference.trace import Trace, commit_boundary
from tests.ledger.conftest import GENESIS, serving
from tests.ledger.helpers import body
from trainer.network.ledger_client import LedgerClient, RetryPolicy
from trainer.round.boundaries import Advance, BoundaryStore, answer_requests, recompute

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=16, seq_len=8)
K, BATCH = 8, 2
CFG = InnerConfig(steps=K, lr=3e-3, batch_size=BATCH)
ROWS = torch.randint(
    0, 256, (K * BATCH, SMALL.seq_len + 1), generator=torch.Generator().manual_seed(3)
)
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
runner = CliRunner()


def node_advance(skip: int | None) -> Advance:
    """The node's own steps; a cheater skips step ``skip`` (claiming it) every time it runs."""
    honest = recompute(lambda r: ROWS, CFG, SMALL)

    def advance(
        r: int, state: dict[str, torch.Tensor], first: int, steps: int
    ) -> dict[str, torch.Tensor]:
        for i in range(first, first + steps):
            state = {**state, STEP: state[STEP] + 1} if i == skip else honest(r, state, i, 1)
        return state

    return advance


def kept_round(store: BoundaryStore, advance: Advance) -> tuple[Trace, list[str]]:
    """Round 1 of a node: boundaries at 0 and K (one segment), kept in ``store``."""
    base = {n: p.detach().clone() for n, p in GPT(SMALL, seed=5).named_parameters()}
    start = fresh_state(base)
    end = advance(1, start, 0, K)
    keep = store.keeper(1)
    marks = [commit_boundary(0, 0, start, base), commit_boundary(1, K, end, base)]
    keep(marks[0], start)
    keep(marks[1], end)
    trace = Trace(tuple(marks))
    store.finish(1, trace)
    return trace, ["0x" + m.state_hash.hex() for m in marks]


def bisect(  # type: ignore[no-untyped-def]
    client: TestClient, ledger: Ledger, run: str, node: NodeKey, domain: Eip712Domain,
    tmp_path: Path, skip: int | None,
):  # fmt: skip
    store = BoundaryStore(tmp_path / node.address)
    advance_fn = node_advance(skip)
    trace, (start, end) = kept_round(store, advance_fn)
    att = attestation(node, run_id=run, round_=1, base=GENESIS, result=h("r1"),
                      trace_root="0x" + trace.root.hex())  # fmt: skip
    assert client.post("/v1/attestations", json=body(att, node.key, domain)).status_code == 202
    lc = LedgerClient("http://testserver", http=client, retry=RetryPolicy(attempts=1),
                      uploader=UploadSigner(node.key, domain))  # fmt: skip
    with Session(ledger.engine) as s:  # the segment audit's inputs: both ends delivered
        for b in (0, 1):
            intake.request_boundary(s, run, 1, node.address, b, deadline_s=60)
    assert answer_requests(store, lc, bytes.fromhex(run[2:]), node.address) == 2
    probes = []
    with Session(ledger.engine) as s:
        row = bisect_failed_segment(
            s, ledger.blobs, run_id=run, round_=1, node=node.address, boundary=0,
            segment=(0, K), start_hash=start, end_hash=end, cfg=CFG, model_cfg=SMALL, rows=ROWS,
            ask=intake.ask_probe(s), threads=1,
        )  # fmt: skip
        state, probe = row.state, row.probe
    while state == "running":
        probes.append(probe)
        # the node answers the probe (recomputed from boundary 0, uploaded signed)
        assert answer_requests(store, lc, bytes.fromhex(run[2:]), node.address,
                               advance=advance_fn) == 1  # fmt: skip
        with Session(ledger.engine) as s:  # a new session each time: all it needs is stored
            (row,) = advance_bisections(s, ledger.blobs, lambda r: ROWS, ask=intake.ask_probe(s),
                                        threads=1)  # fmt: skip
            state, probe = row.state, row.probe
    with Session(ledger.engine) as s:
        # the segment audit's fraud record (the lead's failure path writes it)
        fraud = FraudRecord(run_id=run, round=1, node=node.address, digest=h("d"),
                            evidence_hash=h("e"), evidence="{}")  # fmt: skip
        s.add(fraud)
        s.commit()
        s.refresh(fraud)
        row = s.exec(select(SegmentBisection).where(SegmentBisection.node == node.address)).one()
        s.expunge(row)
        asked = [r.at_step for r in s.exec(select(BoundaryRequest)).all()]
    return row, probes, asked, fraud.id


def doc_lines() -> list[list[str]]:
    block = re.search(r"<!-- verdict -->\s*```bash\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/cli.md: no ```bash block after <!-- verdict -->"
    return [shlex.split(line) for line in block.group(1).strip().splitlines()]


@pytest.mark.parametrize("skip", [5])
def test_a_skipped_step_is_named_and_rechecked_by_coloco_audit(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skip: int,
) -> None:  # fmt: skip
    row, probes, asked, fraud_id = bisect(client, ledger, started_run, nodes[0], domain,
                                          tmp_path, skip)  # fmt: skip
    assert row.state == "done" and row.holds is False
    assert (row.lo, row.hi) == (skip, skip + 1)
    assert probes == [4, 6, 5]  # log2(8) states asked for, each through a boundary request
    assert sorted(a for a in asked if a >= 0) == [4, 5, 6]
    evidence = json.loads(row.evidence or "{}")
    assert evidence["step"] == skip and evidence["kind"] == "one_step_verdict"
    assert row.evidence_hash and row.evidence_hash.startswith("0x")

    # the blob store's collection keeps what the verdict names, however old
    from datetime import timedelta

    from ledger.core.models import utcnow

    ledger.blobs.collect_garbage(grace_s=60, now=utcnow() + timedelta(days=30))
    for name in ("before", "after", "batch"):
        assert ledger.blobs.exists(evidence[name]), name

    monkeypatch.chdir(tmp_path)
    for var in ("COLOCO_CONFIG", "COLOCO_LEDGER_URL"):
        monkeypatch.delenv(var, raising=False)
    (by_id, as_json, by_file, whole) = doc_lines()
    with serving(ledger) as url:
        served = client.get(f"/v1/frauds/{fraud_id}/verdict").json()
        Path("evidence.json").write_text(json.dumps(served["evidence"]))
        args = [a.replace("FRAUD_ID", str(fraud_id)) for a in by_id[1:]]
        out = runner.invoke(app, [*args, "--ledger-url", url])
        assert out.exit_code == 1, out.output
        assert f"differs: round 1 node {nodes[0].address}, step {skip}" in out.output
        assert "confirmed on the step's top" in out.output  # a skipped step: the top suffices
        out = runner.invoke(app, [*[a.replace("FRAUD_ID", str(fraud_id)) for a in as_json[1:]],
                                  "--ledger-url", url])  # fmt: skip
        doc = json.loads(out.output.strip().splitlines()[-1])
        assert doc["verdict"] == "differs" and doc["step"] == skip and doc["agrees_with_ledger"]
        assert doc["scope"] == "top"
        out = runner.invoke(app, [*[a.replace("FRAUD_ID", str(fraud_id)) for a in whole[1:]],
                                  "--ledger-url", url])  # fmt: skip
        assert out.exit_code == 1 and "one inner step" in out.output, out.output
        out = runner.invoke(app, [*by_file[1:], "--ledger-url", url])
        assert out.exit_code == 1 and f"step {skip}" in out.output
        # an id with no bisection is named
        out = runner.invoke(app, ["audit", "999", "--ledger-url", url])
        assert out.exit_code != 0
        assert "fraud record 999 has no bisected segment" in str(out.exception)


def test_an_honest_node_s_last_step_holds(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    row, probes, _, _ = bisect(client, ledger, started_run, nodes[1], domain, tmp_path, None)
    # every probe agrees: the interval moves right to the last step, which holds
    assert probes == [4, 6, 7]
    assert row.state == "done" and row.holds is True and (row.lo, row.hi) == (K - 1, K)
    assert "is not one step's" in (row.reason or "")


def test_a_probe_that_is_not_a_state_is_refused(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    from protocol.blobs import encode_blob
    from protocol.hashing import hash_state_dict
    from tests.ledger.helpers import upload_headers

    node = nodes[2]
    trace, _ = kept_round(BoundaryStore(tmp_path / "n"), node_advance(None))
    att = attestation(node, run_id=started_run, round_=1, base=GENESIS, result=h("r1"),
                      trace_root="0x" + trace.root.hex())  # fmt: skip
    assert client.post("/v1/attestations", json=body(att, node.key, domain)).status_code == 202
    with Session(ledger.engine) as s:
        intake.request_boundary(s, started_run, 1, node.address, 0, deadline_s=60, at_step=3)
    listed = client.get("/v1/boundaries/requests", params={"node": node.address}).json()
    assert [(r["boundary"], r["at_step"]) for r in listed] == [(0, 3)]
    junk = {"notes/x": torch.zeros(3)}  # a blob, signed and stored, but no state
    blob_hash = "0x" + hash_state_dict(junk).hex()
    put = client.put(f"/v1/blobs/{blob_hash}", content=encode_blob(junk),
                     headers=upload_headers(node, domain, blob_hash))  # fmt: skip
    assert put.status_code == 201, put.text
    delivery = {"run_id": started_run, "round": 1, "node": node.address, "boundary": 0,
                "step": 3, "state_hash": blob_hash, "sketch_hash": h("s"), "proof": []}  # fmt: skip
    refused = client.post("/v1/boundaries/deliveries", json={**delivery, "at_step": 3})
    assert refused.status_code == 422 and "no known prefix" in refused.text
    # a probe nobody asked for is not taken either
    other = client.post("/v1/boundaries/deliveries", json={**delivery, "at_step": 2})
    assert other.status_code == 404


def test_a_probe_not_delivered_in_time_ends_the_bisection_missed(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    from datetime import timedelta

    from ledger.core.models import utcnow

    node = nodes[1]
    store = BoundaryStore(tmp_path / "silent")
    trace, (start, end) = kept_round(store, node_advance(2))
    att = attestation(node, run_id=started_run, round_=1, base=GENESIS, result=h("r1"),
                      trace_root="0x" + trace.root.hex())  # fmt: skip
    assert client.post("/v1/attestations", json=body(att, node.key, domain)).status_code == 202
    lc = LedgerClient("http://testserver", http=client, retry=RetryPolicy(attempts=1),
                      uploader=UploadSigner(node.key, domain))  # fmt: skip
    with Session(ledger.engine) as s:
        for b in (0, 1):
            intake.request_boundary(s, started_run, 1, node.address, b, deadline_s=60)
    answer_requests(store, lc, bytes.fromhex(started_run[2:]), node.address)
    with Session(ledger.engine) as s:
        row = bisect_failed_segment(
            s, ledger.blobs, run_id=started_run, round_=1, node=node.address, boundary=0,
            segment=(0, K), start_hash=start, end_hash=end, cfg=CFG, model_cfg=SMALL, rows=ROWS,
            ask=intake.ask_probe(s), deadline_s=30, threads=1,
        )  # fmt: skip
        assert (row.state, row.probe) == ("running", 4)
        # a node without its round inputs cannot answer: nothing is delivered
        assert answer_requests(store, lc, bytes.fromhex(started_run[2:]), node.address) == 0
        (row,) = advance_bisections(s, ledger.blobs, lambda r: ROWS, ask=intake.ask_probe(s),
                                    now=utcnow() + timedelta(seconds=31))  # fmt: skip
        assert row.state == "missed" and row.evidence is None
        assert "after 4 steps in time" in (row.reason or "")
        probe = s.exec(select(BoundaryRequest).where(BoundaryRequest.at_step == 4)).one()
        assert probe.state == "missed"  # and the request's own rule fails the node


def test_a_bisection_that_cannot_replay_ends_in_error_and_a_failing_one_does_not_stop_others(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    """The ledger's periodic work moves every running bisection on: one whose rows or states do
    not fit the run's model (ConfigError) ends ``error`` with the reason, one whose replay fails
    otherwise stays running for the next pass, and neither stops the other."""
    from ledger.judge import segments
    from protocol.errors import ConfigError

    run = started_run
    rows: dict[str, BaseException] = {
        nodes[0].address: ConfigError("the stored inputs name another model"),
        nodes[1].address: RuntimeError("the corpus folder is not mounted yet"),
    }
    for node in nodes[:2]:
        store = BoundaryStore(tmp_path / node.address)
        advance_fn = node_advance(None)
        trace, (start, end) = kept_round(store, advance_fn)
        att = attestation(node, run_id=run, round_=1, base=GENESIS, result=h("r1"),
                          trace_root="0x" + trace.root.hex())  # fmt: skip
        assert client.post("/v1/attestations", json=body(att, node.key, domain)).status_code == 202
        lc = LedgerClient("http://testserver", http=client, retry=RetryPolicy(attempts=1),
                          uploader=UploadSigner(node.key, domain))  # fmt: skip
        with Session(ledger.engine) as s:
            for b in (0, 1):
                intake.request_boundary(s, run, 1, node.address, b, deadline_s=60)
        answer_requests(store, lc, bytes.fromhex(run[2:]), node.address)
        with Session(ledger.engine) as s:  # no rows read: the first probe is only asked for
            row = bisect_failed_segment(
                s, ledger.blobs, run_id=run, round_=1, node=node.address, boundary=0,
                segment=(0, K), start_hash=start, end_hash=end, cfg=CFG, model_cfg=SMALL,
                rows=ROWS, ask=intake.ask_probe(s), threads=1,
            )  # fmt: skip
            assert (row.state, row.probe) == ("running", 4)
            # the probe (boundary 0, at_step 4) does not stand for boundary 0 in the audit
            kept = segments.existing(s, run, 1, node.address, [(0, -1), (1, -1)])
            assert {b: r.at_step for b, r in kept.items()} == {(0, -1): -1, (1, -1): -1}
        assert answer_requests(store, lc, bytes.fromhex(run[2:]), node.address,
                               advance=advance_fn) == 1  # fmt: skip

    def rows_of(row: SegmentBisection) -> torch.Tensor:
        raise rows[row.node]

    with Session(ledger.engine) as s:
        out = advance_bisections(s, ledger.blobs, rows_of, ask=intake.ask_probe(s), threads=1)
        assert [r.node for r in out] == [nodes[0].address]  # the other one: retried next pass
        states = {r.node: (r.state, r.reason) for r in s.exec(select(SegmentBisection)).all()}
    assert states[nodes[0].address][0] == "error"
    assert "cannot be replayed on the run's model" in (states[nodes[0].address][1] or "")
    assert states[nodes[1].address] == ("running", None)


def test_replay_inputs_round_trip_through_their_json() -> None:
    """A bisection stores the round's replay inputs as JSON and rebuilds its rows from them."""
    from ledger.judge.replay import ReplayInputs
    from protocol.errors import ConfigError

    inputs = ReplayInputs(bytes(range(32)), 3, "0x" + "22" * 20, 4096, 10, 3e-3, (7000, 3000),
                          "tiny", shard_tokens=8192, data_root=bytes(32))  # fmt: skip
    assert ReplayInputs.from_json(json.loads(json.dumps(inputs.to_json()))) == inputs
    with pytest.raises(ConfigError, match="replay inputs do not parse"):
        ReplayInputs.from_json({"round": 3})
