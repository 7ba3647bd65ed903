"""The public auditor (``coloco audit --run-id``, coloco_cli.audit.audit_rounds) under the carried
inner state: a real node (trainer.round.node.NodeRunner) trains against anvil and the ledger,
the ledger segment-audits it and serves what it drew and what the node delivered
(``GET /v1/runs/{run}/rounds/{round}/segment-audits``); the auditor re-runs each drawn segment
from the delivered blobs with the ledger's own code. An honest round passes the re-check; a
delivered state swapped for another fails it; a carried round the ledger did not audit is
``unverifiable``, never failed (its start, the node's carried AdamW moments, is not public)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from coloco_cli.audit import UNVERIFIABLE, audit_rounds
from coloco_cli.config_history import ConfigHistory
from ledger.core.models import SKETCH_REQUEST, STATE_REQUEST, BoundaryRequest
from ledger.service import Ledger
from protocol.blobs import encode_blob
from protocol.chain import ChainClient
from protocol.hashing import hash_state_dict
from reference.data import Corpus
from reference.settings import TrainingSettings
from reference.sketch import FRESH_ADAM
from tests.ledger.conftest import (  # noqa: F401 - pytest fixtures
    db_url,
    deployment_file,
    nodes,
    settings_for,
)
from tests.ledger.helpers import governance_sets
from tests.redteam.rig import Rig
from tests.redteam.test_replayable_node import RUN, _audited_rounds, _carry
from tests.trainer.conftest import corpus_dir, store_port  # noqa: F401 - pytest fixtures
from trainer.network.ledger_client import LedgerClient
from trainer.round.node import NodeRunner

pytestmark = [pytest.mark.anvil]


def _public_audit(client: TestClient, rig: Rig) -> list[dict[str, Any]]:
    """``coloco audit --run-id RUN --fraction 1``'s verdicts, against the ledger's HTTP API."""
    corpus = rig.corpus
    cfg = TrainingSettings.read(ChainClient(rig.chain.rpc_url, rig.deployment))
    return audit_rounds(
        client, "0x" + RUN.hex(), fraction=1.0, model="tiny", inner_lr=cfg.inner_lr,
        mixture=tuple(cfg.data_mixture_bps), tolerance=1e-2, corpus_dir=corpus,
        inner_steps=cfg.inner_steps, data_root=Corpus.from_folder(corpus).root, carried=True,
    )  # fmt: skip


def test_a_segment_audited_carried_round_passes_the_public_recheck_and_a_swapped_state_fails(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = rig.key
    seen: dict[str, Any] = {}

    def audit(ledger: Ledger, client: TestClient, node: NodeRunner, lc: LedgerClient) -> None:
        url = f"/v1/runs/0x{RUN.hex()}/rounds/2/segment-audits"
        seen["served"] = client.get(url).json()
        seen["honest"] = _public_audit(client, rig)
        # round 1's last boundary served with a sketch that commits another AdamW state (a
        # fresh one; its other parts the same): round 2's carried start no longer matches it
        with Session(ledger.engine) as s:
            last = s.exec(select(BoundaryRequest).where(
                BoundaryRequest.round == 1, BoundaryRequest.at_step == SKETCH_REQUEST,
            ).order_by(BoundaryRequest.boundary.desc())).first()  # type: ignore[attr-defined]  # fmt: skip
            assert last is not None and last.sketch_hash is not None
            delivered = ledger.blobs.tensors(last.sketch_hash) or {}
            forged = {n: t.clone() for n, t in delivered.items()}
            forged["sketch/adam"] = torch.frombuffer(bytearray(FRESH_ADAM), dtype=torch.uint8)
            name = "0x" + hash_state_dict(forged).hex()
            ledger.blobs.put(name, encode_blob(forged))
            kept, last.sketch_hash = last.sketch_hash, name
            s.add(last)
            s.commit()
            seen["forked"] = _public_audit(client, rig)
            last.sketch_hash = kept
            s.add(last)
            s.commit()
        # the delivered start of round 2's drawn segment swapped for another state (a ledger
        # that serves other hashes, or a store that was altered): the blob is well formed and
        # hashes to its new name, but it is not the state the node trained through
        with Session(ledger.engine) as s:
            row = s.exec(select(BoundaryRequest).where(
                BoundaryRequest.round == 2, BoundaryRequest.at_step == STATE_REQUEST,
            ).order_by(BoundaryRequest.boundary.desc())).first()  # type: ignore[attr-defined]  # fmt: skip
            assert row is not None and row.state_hash is not None
            state = ledger.blobs.tensors(row.state_hash)
            assert state is not None
            other = {n: (t * 1.01 if n.startswith("weights/") else t) for n, t in state.items()}
            name = "0x" + hash_state_dict(other).hex()
            ledger.blobs.put(name, encode_blob(other))
            row.state_hash = name
            s.add(row)
            s.commit()
        seen["swapped"] = _public_audit(client, rig)
        # a blob altered in the store: it no longer hashes to its name, so nothing is checked
        # against it (unavailable, neither passed nor failed)
        (first,) = client.get(url.replace("/2/", "/1/")).json()
        sketch = next(b["sketch_hash"] for b in first["boundaries"] if not b["full"])
        path = ledger.blobs.path(sketch)
        tensors = {n: t.clone() for n, t in (ledger.blobs.tensors(sketch) or {}).items()}
        path.chmod(0o644)
        path.write_bytes(encode_blob({n: t * 2 for n, t in tensors.items()}))
        seen["altered"] = _public_audit(client, rig)

    scores, states, _ = _audited_rounds(
        rig,
        config=_carry(monkeypatch, True), audit_segments=1, then=audit,
    )  # fmt: skip
    assert states == ["committed", "committed"], scores
    (served,) = seen["served"]
    assert served["node"] == key.address and served["ledger_verdict"] == "passed", served
    assert len(served["segments"]) == 1 and not served["public_start"], served
    assert served["audit_seed"].startswith("0x") and served["boundaries"], served
    assert all(b["state"] == "delivered" for b in served["boundaries"]), served
    honest = sorted(seen["honest"], key=lambda v: v["round"])
    assert [(v["round"], v["check"], v["verdict"]) for v in honest] == [
        (1, "segments", "pass"),
        (2, "segments", "pass"),
    ], honest
    assert "segment replay matches" in honest[1]["reason"], honest[1]
    assert "boundary 0 starts a fresh AdamW" in honest[0]["reason"], honest[0]
    assert "boundary 0 carries round 1's AdamW state" in honest[1]["reason"], honest[1]
    forked = {v["round"]: v for v in seen["forked"]}
    assert forked[2]["verdict"] == "fail", forked[2]
    assert "neither fresh nor the one the node's round 1 ended with" in forked[2]["reason"]
    swapped = {v["round"]: v for v in seen["swapped"]}
    assert swapped[1]["verdict"] == "pass", swapped[1]
    assert swapped[2]["verdict"] == "fail", swapped[2]["reason"]  # the re-check catches it
    altered = {v["round"]: v for v in seen["altered"]}
    assert altered[1]["verdict"] == "unavailable", altered[1]
    assert "does not hash to its name" in altered[1]["reason"], altered[1]


def test_a_carried_round_the_ledger_did_not_audit_is_unverifiable_not_failed(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ledger audits nothing (fraction 0): round 2 starts from the AdamW moments round 1
    left (committed in its trace, not public: a whole-round replay from its base with a fresh
    AdamW lands about 0.6 away), so it is unverifiable from public data, and the auditor says so
    instead of failing the node. Round 1 too: the auditor replays a round whole only in the
    fresh inner mode (a carried node's first round does start fresh, but the auditor does not
    take a node's word for which of its rounds that is)."""
    seen: dict[str, Any] = {}

    def audit(ledger: Ledger, client: TestClient, node: NodeRunner, lc: LedgerClient) -> None:
        seen["served"] = client.get(f"/v1/runs/0x{RUN.hex()}/rounds/2/segment-audits").json()
        seen["verdicts"] = _public_audit(client, rig)

    scores, _, _ = _audited_rounds(
        rig,
        config=_carry(monkeypatch, True), audit_fraction=0.0, then=audit,
    )  # fmt: skip
    assert all(s["verified"] for s in scores), scores
    assert seen["served"] == [], seen  # the ledger asked no boundary of it
    verdicts = sorted(seen["verdicts"], key=lambda v: v["round"])
    assert [(v["round"], v["verdict"]) for v in verdicts] == [
        (1, "unverifiable"),
        (2, "unverifiable"),
    ], verdicts
    assert all(v["reason"] == UNVERIFIABLE for v in verdicts), verdicts


def test_an_overlapped_carried_round_passes_the_public_recheck_from_its_committed_origin(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The overlap schedule (trainer.round.overlap): round 2 starts from round 1's base less the
    node's own round 1 progress, not from its attested base. The ledger audited it from that
    origin (boundary 0 in full, round 1's boundaries 0 and last in full); the public auditor
    finds the same with the ledger's ``starts_elsewhere``, checks the origin with
    ``ledger.judge.origin_check`` from round 1's delivered boundaries and re-runs the segment
    from it: it passes (a whole-round replay from the attested base failed it at 0.68-0.82)."""
    seen: dict[str, Any] = {}

    def audit(ledger: Ledger, client: TestClient, node: NodeRunner, lc: LedgerClient) -> None:
        seen["served"] = client.get(f"/v1/runs/0x{RUN.hex()}/rounds/2/segment-audits").json()
        seen["verdicts"] = _public_audit(client, rig)

    scores, _, _ = _audited_rounds(
        rig,
        overlap=True, config=_carry(monkeypatch, True), audit_segments=1, then=audit,
    )  # fmt: skip
    by_round = {s["round"]: s for s in scores}
    assert "origin: the round started from the last round's base" in by_round[2]["reason"]
    (served,) = seen["served"]
    assert served["origin_state_hash"], served  # boundary 0 delivered in full: the origin
    verdicts = {v["round"]: v for v in seen["verdicts"]}
    assert [(r, v["check"], v["verdict"]) for r, v in sorted(verdicts.items())] == [
        (1, "segments", "pass"),
        (2, "segments", "pass"),
    ], verdicts
    assert "origin: the round started from the last round's base" in verdicts[2]["reason"]


def test_rounds_before_a_vote_are_rechecked_under_the_version_they_signed(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vote doubles the inner lr after rounds 1 and 2. ``coloco audit --run-id`` re-checks
    each pair under the TrainingConfig version its attestation signs, read from the chain at
    the block that version took effect (coloco_cli.config_history): both rounds pass. Under
    today's settings, what the auditor replayed with before, the same segments fail."""
    seen: dict[str, Any] = {}

    def audit(ledger: Ledger, client: TestClient, node: NodeRunner, lc: LedgerClient) -> None:
        views = ChainClient(rig.chain.rpc_url, rig.deployment)
        trained = TrainingSettings.read(views)
        governance_sets(rig.chain, rig.deployment, "setInnerLoop", trained.inner_steps,
                        trained.inner_lr_e6 * 2)  # fmt: skip
        history = ConfigHistory(views, rig.deployment.deployment_block)
        common: dict[str, Any] = {
            "fraction": 1.0, "model": "tiny", "tolerance": 1e-2, "corpus_dir": rig.corpus,
            "data_root": Corpus.from_folder(rig.corpus).root, "carried": True,
        }  # fmt: skip
        seen["signed"] = audit_rounds(client, "0x" + RUN.hex(), config_of=history.get, **common)
        now = history.current
        seen["versions"] = (trained.version, now.version, history.get(trained.version))
        seen["today"] = audit_rounds(
            client, "0x" + RUN.hex(), inner_lr=now.inner_lr, inner_steps=now.inner_steps,
            mixture=tuple(now.data_mixture_bps), **common,
        )  # fmt: skip

    scores, states, _ = _audited_rounds(
        rig,
        config=_carry(monkeypatch, True), audit_segments=1, then=audit,
    )  # fmt: skip
    assert states == ["committed", "committed"], scores
    trained, now, read = seen["versions"]
    assert now == trained + 1 and read is not None and read.version == trained
    assert {s["config_version"] for s in scores} == {trained}
    signed = sorted(seen["signed"], key=lambda v: v["round"])
    assert [(v["round"], v["check"], v["verdict"]) for v in signed] == [
        (1, "segments", "pass"),
        (2, "segments", "pass"),
    ], signed
    today = {v["round"]: v for v in seen["today"]}
    assert today[1]["verdict"] == "fail", today[1]
