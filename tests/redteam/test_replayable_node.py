"""The segment audit end to end: a real :class:`trainer.round.node.NodeRunner` (the code ``coloco
node run`` runs) trains on torch's default threads (2 here) against anvil and the ledger, which
audits every one of its node-rounds (audit fraction 1, every segment drawn): it asks the node for
the boundary states of its signed trace, the node uploads them (trainer.round.boundaries), and the
ledger replays each segment from the node's own state on its cores (ledger.judge.segments). An
honest node passes, fresh or with its inner AdamW carried across rounds. The segment replay is a
screen and the one-step verdict decides: a node that skips one inner step inside a segment fails
the screen, the round waits while the failed segment is bisected live to the one step it skipped
(the ledger asks for the node's states inside the segment, the node recomputes them from its kept
boundary, ``NodeRunner.advance``), and only then is the node failed with a fraud record naming the
verdict, which ``coloco audit <fraud id>`` re-checks; an honest node whose segment fails the
screen (a tolerance far below its noise) is exonerated by its verdict and paid; a node that does
not answer a probe, or withholds its boundaries, fails once their deadline passes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from bench.harness.nodes import domain_of
from ledger.core.models import FraudRecord, RoundState, SegmentBisection
from ledger.main import create_app
from ledger.service import Ledger
from protocol.chain import ChainClient
from reference.data import Corpus
from reference.model import GPTConfig
from reference.segment import STEP
from tests.ledger.conftest import (  # noqa: F401 - pytest fixtures
    ADMIN,
    db_url,
    deployment_file,
    nodes,
    settings_for,
)
from tests.ledger.helpers import governance_sets
from tests.redteam.rig import Rig
from tests.trainer.conftest import corpus_dir, store_port  # noqa: F401 - pytest fixtures
from trainer.network.ledger_client import LedgerClient
from trainer.network.membership import MembershipConfig
from trainer.round.attest import Attester
from trainer.round.boundaries import Advance, answer_requests
from trainer.round.node import NodeRunner, NodeSettings
from trainer.round.overlap import Overlap
from trainer.round.recovery import Recovery, genesis_hash
from trainer.round.runconfig import ChainConfig, RunConfig
from trainer.round.schedule import RoundReport, RoundWork

pytestmark = [pytest.mark.anvil]

TINY = GPTConfig.preset("tiny")
RUN = bytes.fromhex("a7" * 32)
THREADS = 2  # torch's default on this machine: the node no longer trains on one thread


class _KeepState(ChainConfig):
    """The chain's config, with the inner AdamW state carried across rounds."""

    carried = True

    def read(self, block: int | None = None) -> RunConfig:
        cfg = super().read(block)
        return dataclasses.replace(cfg, settings=cfg.settings.with_inner_state(self.carried))


class _FreshState(_KeepState):
    """The chain's config, with a fresh inner AdamW every round (``ChainConfig``'s default mode is
    reference.inner.CARRY_STATE as imported, which a test's monkeypatch does not change)."""

    carried = False


@contextmanager
def _skipping(call: int) -> Iterator[None]:
    """AdamW's ``call``-th step in this process skipped: no update, but its step count advanced
    (a node that saves one step's compute and keeps its trace's step counts plausible)."""
    original = torch.optim.AdamW.step
    calls = [0]

    def step(self: torch.optim.AdamW, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] != call:
            return original(self, *args, **kwargs)
        for group in self.param_groups:
            for p in group["params"]:
                if "step" in self.state.get(p, {}):
                    self.state[p]["step"] += 1
        return None

    torch.optim.AdamW.step = step  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        torch.optim.AdamW.step = original  # type: ignore[method-assign]


def _settle(ledger: Ledger, node: NodeRunner | None, lc: LedgerClient, r: int,
            timeout: float = 180.0, advance: Advance | None = None) -> str:  # fmt: skip
    """Tick the ledger until round ``r`` is committed or final; ``node`` (None: it withholds)
    answers the boundary requests of the audit meanwhile, as its run loop does after a round
    (``advance``: how it recomputes a bisection's probe, default its own steps)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        ledger.tick()
        if node is not None:
            assert node.boundaries is not None
            answer_requests(node.boundaries, lc, RUN, node.address, advance or node.advance)
        with Session(ledger.engine) as s:
            rnd = s.exec(select(RoundState).where(RoundState.round == r)).first()
        if rnd is not None and rnd.state in ("committed", "final"):
            return rnd.state
        assert time.monotonic() < deadline, f"round {r} is {rnd and rnd.state}"
        time.sleep(0.05)


def _audited_rounds(
    rig: Rig,
    *,
    rounds: int = 2,
    config: type[ChainConfig] = ChainConfig,
    serve: bool = True,
    skip_call: int = 0,
    local_ranks: int = 1,
    overlap: bool = False,
    bounded: bool = False,
    schedule: Callable[[NodeRunner], Overlap] | None = None,
    advance_of: Callable[[NodeRunner], Advance] | None = None,
    then: Callable[[Ledger, TestClient, NodeRunner, LedgerClient], None] | None = None,
    **overrides: Any,
) -> tuple[list[dict[str, Any]], list[str], Ledger]:
    """The node's scores of each round, the rounds' states, and the (stopped) ledger;
    ``overlap``, ``bounded``: the node's schedule (lockstep: neither), ``schedule(node)``: another
    overlap schedule (a cheat's); ``advance_of(node)``: how the node answers a bisection's
    probes (default its own steps); ``then``: run before the ledger stops."""
    chain, deployment, key, corpus, port, work = (
        rig.chain,
        rig.deployment,
        rig.key,
        rig.corpus,
        rig.port,
        rig.work,
    )
    governance_sets(chain, deployment, "setDataRoot", Corpus.from_folder(corpus).root)  # the run's
    settings = rig.settings_for(rig.db_url, **{"audit_fraction": 1.0, "audit_segments": 1000,
                            "usefulness_model": "tiny", "usefulness_corpus": corpus,
                            **overrides})  # fmt: skip
    ledger = Ledger(settings)
    try:
        with TestClient(create_app(ledger=ledger)) as client:
            genesis = "0x" + genesis_hash(TINY, 0).hex()
            r = client.post(
                "/v1/runs",
                json={"run_id": "0x" + RUN.hex(), "genesis_checkpoint": genesis},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 201, r.text
            ledger.indexer.catch_up()
            lc = LedgerClient("http://testserver", http=client)
            cc = ChainClient(chain.rpc_url, deployment)
            node = NodeRunner(
                NodeSettings(
                    run_id=RUN, model=TINY, rendezvous_port=port,
                    membership=MembershipConfig(min_nodes=1, join_window_s=0.0),
                    data_path=str(corpus), max_rounds=rounds, eval_rows=8,
                    checkpoint_dir=work, local_ranks=local_ranks, overlap=overlap,
                    bounded_overlap=bounded,
                ),
                Attester(key, domain_of(deployment), RUN, lc),
                config(cc, batch_size=4),
                recovery=Recovery(RUN, TINY, 0, chain=cc, ledger=lc),
            )  # fmt: skip
            if schedule is not None:
                node.schedule = schedule(node)
            threads = torch.get_num_threads()
            torch.set_num_threads(THREADS)
            try:
                with _skipping(skip_call) if skip_call else _nothing():
                    node.run()
            finally:
                torch.set_num_threads(threads)
            advance = advance_of(node) if advance_of is not None else None
            states = [_settle(ledger, node if serve else None, lc, r_, advance=advance)
                      for r_ in range(1, rounds + 1)]  # fmt: skip
            scores = []
            for r_ in range(1, rounds + 1):
                scores += client.get(f"/v1/runs/0x{RUN.hex()}/rounds/{r_}").json()["scores"]
            if then is not None:
                then(ledger, client, node, lc)
            return scores, states, ledger
    finally:
        ledger.stop()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _skipping_step(node: NodeRunner, round_: int, step: int) -> Advance:
    """The cheater's answers to a bisection's probes: its own steps re-run (``node.advance``)
    with step ``step`` of round ``round_`` skipped again (its trace's lie, told consistently)."""

    def advance(r: int, state: dict[str, torch.Tensor], first: int, steps: int,
                ) -> dict[str, torch.Tensor]:  # fmt: skip
        for i in range(first, first + steps):
            skip = (r, i) == (round_, step)
            state = {**state, STEP: state[STEP] + 1} if skip else node.advance(r, state, i, 1)
        return state

    return advance


def _bisection(ledger: Ledger) -> SegmentBisection:
    """The ledger's one bisection row."""
    with Session(ledger.engine) as s:
        row = s.exec(select(SegmentBisection)).one()
        s.expunge(row)
    return row


def _refusing(node: NodeRunner) -> Advance:
    """A node that serves its committed boundaries but never answers a bisection's probe."""
    from protocol.errors import TrainerError

    def advance(r: int, state: dict[str, torch.Tensor], first: int, steps: int,
                ) -> dict[str, torch.Tensor]:  # fmt: skip
        raise TrainerError(f"this node does not recompute round {r}'s states")

    return advance


def test_a_multi_threaded_node_passes_the_segment_audit_and_a_skipped_step_is_caught(
    rig: Rig,
) -> None:
    key = rig.key
    checked: dict[str, Any] = {}

    def verdict(ledger: Ledger, client: TestClient, node: NodeRunner, lc: LedgerClient) -> None:
        """The verdict of the failed segment, served and re-checked."""
        from typer.testing import CliRunner

        from coloco_cli.main import app
        from tests.ledger.conftest import serving

        checked["row"] = _bisection(ledger)
        (fraud,) = client.get("/v1/frauds").json()
        served = client.get(f"/v1/frauds/{fraud['id']}/verdict")
        assert served.status_code == 200, served.text
        checked["served"] = served.json()
        with serving(ledger) as url:
            out = CliRunner().invoke(app, ["audit", str(fraud["id"]), "--ledger-url", url])
        checked["audit"] = (out.exit_code, out.output)

    # round 2's 8th inner step (H 50: AdamW's 58th call) is skipped, inside segment 1 (steps 5-9)
    scores, states, ledger = _audited_rounds(
        rig,
        skip_call=50 + 8, advance_of=lambda node: _skipping_step(node, 2, 7), then=verdict,
    )  # fmt: skip
    honest, cheat = sorted(scores, key=lambda s: s["round"])
    assert states == ["committed", "final"], (states, scores)
    assert honest["verified"] and int(honest["reward"]) > 0, honest
    assert "audited (" in honest["reason"] and "segment replay matches" in honest["reason"]
    assert honest["reason"].count("segment ") >= 10, honest  # every segment of H 50 / 5
    assert cheat["reason"].startswith("[audit_failed] segment 1: segment replay of steps 5..9")
    # failed only once the one-step verdict named the step: the round waited for it
    assert "one-step verdict: step 7 of round 2: the replay of that one step" in cheat["reason"]
    with Session(ledger.engine) as s:
        (fraud,) = s.exec(select(FraudRecord)).all()
    evidence = json.loads(fraud.evidence)
    assert fraud.round == 2 and evidence["segment"] == 1 and evidence["first_step"] == 5
    assert evidence["segment_error"] > 10 * 1e-3 and evidence["audit_seed"].startswith("0x")
    assert set(evidence["boundary_state_hashes"]) >= {"1", "2", "10"}, evidence
    row = checked["row"]
    assert (row.state, row.holds, row.round, row.lo, row.hi) == ("done", False, 2, 7, 8), row
    assert (row.seg_lo, row.seg_hi, row.boundary) == (5, 10, 1), row
    assert evidence["one_step_verdict"] == row.evidence_hash and row.evidence_hash, evidence
    assert row.updated_at <= fraud.created_at, (row.updated_at, fraud.created_at)
    assert checked["served"]["evidence"]["step"] == 7, checked["served"]
    code, output = checked["audit"]
    assert code == 1, output  # `coloco audit <fraud id>` re-checks it in one step: differs
    assert f"differs: round 2 node {key.address}, step 7".lower() in output.lower(), output


def test_an_honest_node_whose_segments_fail_the_screen_is_exonerated_by_its_verdicts(
    rig: Rig,
) -> None:
    """A segment tolerance far below the honest noise of a node on 2 threads replayed on 1
    (about 1e-7) fails every honest segment's screen; the one-step tolerance stays, so each
    bisection ends on a step that holds: the node is paid, no fraud record, no slash."""
    scores, states, ledger = _audited_rounds(
        rig,
        rounds=1, audit_segments=2, segment_tolerance=1e-12, audit_threads=1,
    )  # fmt: skip
    (score,) = scores
    assert states == ["committed"], (states, scores)
    assert score["verified"] and int(score["reward"]) > 0, score
    assert score["reason"].count("but its one-step verdict holds: step ") == 2, score
    assert "> tolerance 1e-12" in score["reason"], score  # both errors in the reason
    with Session(ledger.engine) as s:
        assert s.exec(select(FraudRecord)).all() == []
    row = _bisection(ledger)  # one row per node-round: re-armed on the second failed segment
    assert (row.state, row.holds) == ("done", True), row
    (held,) = json.loads(row.inputs)["held"]
    assert held["boundary"] != row.boundary and "is not one step's" in held["reason"], held


def test_a_bounded_node_whose_segment_0_fails_the_screen_is_exonerated_through_the_move(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bounded overlap's segment 0 ends with the landing's move: a tightened screen (below
    the honest noise of 2 threads replayed on 1) fails it, and its bisection ends on its last
    step, whose one-step check moves the replayed step to the attested base as the node did
    (ledger.judge.bisect, ``FailedSegment.moved``): the verdict holds, the node is paid, no
    fraud record. Without the move the honest step differs and the node is slashed. (The
    draw is fixed on segment 0: the one the move ends.)"""
    from ledger.judge import segments

    monkeypatch.setattr(segments, "drawn_segments", lambda *_: [0])
    scores, states, ledger = _audited_rounds(
        rig, rounds=2, bounded=True, audit_segments=1, segment_tolerance=1e-12,
        audit_threads=1,
    )  # fmt: skip
    two = next(s for s in scores if s["round"] == 2)
    assert states[1] in ("committed", "final"), (states, scores)
    assert two["verified"] and int(two["reward"]) > 0, two["reason"]
    assert "segment 0: " in two["reason"] and "but its one-step verdict holds: step 4" in \
        two["reason"], two["reason"]  # fmt: skip
    with Session(ledger.engine) as s:
        assert s.exec(select(FraudRecord)).all() == []
        rows = s.exec(select(SegmentBisection).where(SegmentBisection.round == 2)).all()
    (row,) = rows
    assert json.loads(row.inputs)["moved"][1] == two["base_checkpoint"], row.inputs
    assert json.loads(row.evidence)["moved_to"] == two["base_checkpoint"], row.evidence


def test_a_node_that_does_not_answer_a_probe_fails(
    rig: Rig,
) -> None:
    """A segment that fails the screen and a node that serves its boundaries but not the
    bisection's probes: it fails once the probe is past the ledger's boundary deadline (5 s
    here, not the bisection's 600 s default: the round waits on it)."""
    scores, states, ledger = _audited_rounds(
        rig,
        rounds=1, audit_segments=1, segment_tolerance=1e-12, audit_threads=1,
        boundary_deadline_s=5.0, advance_of=_refusing,
    )  # fmt: skip
    (score,) = scores
    assert states == ["final"], (states, scores)
    assert score["reason"].startswith("[audit_failed] segment "), score
    assert "no one-step verdict (missed): the node did not deliver its state" in score["reason"]
    row = _bisection(ledger)
    assert row.state == "missed" and row.evidence is None, row
    with Session(ledger.engine) as s:
        (fraud,) = s.exec(select(FraudRecord)).all()
    assert json.loads(fraud.evidence)["one_step_state"] == "missed"


@pytest.mark.slow  # ~50 s here: one round of H 50 on 2 rank processes, every segment replayed
def test_a_node_of_two_local_ranks_passes_the_segment_audit(
    rig: Rig,
) -> None:
    """``--local-ranks 2`` (trainer.round.ranks): the boundary states its rank 0 gathered are
    served by the node, and the ledger's replay of every segment from them (each step's 4 rows
    on one process, where the node split them over 2 ranks) matches."""
    scores, states, _ = _audited_rounds(
        rig,
        rounds=1, local_ranks=2,
    )  # fmt: skip
    (score,) = scores
    assert states[0] in ("committed", "final"), (states, scores)
    assert score["verified"] and int(score["reward"]) > 0, score
    assert "audited (" in score["reason"] and "segment replay matches" in score["reason"]
    assert score["reason"].count("segment ") >= 10, score  # every segment of H 50 / 5


def test_a_node_that_withholds_its_boundaries_fails_at_the_deadline(
    rig: Rig,
) -> None:
    scores, states, _ = _audited_rounds(
        rig,
        rounds=1, serve=False, boundary_deadline_s=2.0,
    )  # fmt: skip
    (score,) = scores
    assert states == ["final"], scores
    assert score["reason"].startswith("[boundary_withheld] boundary "), score
    assert "not delivered by its deadline" in score["reason"], score


@pytest.mark.slow  # 3 minutes here: two rounds, every segment replayed
def test_carried_adamw_state_passes_the_segment_audit(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reference.inner

    monkeypatch.setattr(reference.inner, "CARRY_STATE", True)  # the protocol's switch, for all
    scores, states, _ = _audited_rounds(
        rig,
        config=_KeepState,
    )  # fmt: skip
    assert states == ["committed", "committed"], scores
    for s in scores:  # round 2 starts from the moments round 1 left: boundary 0 carries them
        assert s["verified"] and "segment 0: segment replay matches" in s["reason"], s


class _MadeUpOrigin(Overlap):
    """A cheat on the overlap schedule: each round after the first starts from the newest base
    less twice its own unaveraged progress (a point nobody can recompute), and commits a trace
    consistent with that start: its segments replay, its origin is neither public point."""

    def worked(self, work: RoundWork, group: Any) -> RoundReport | None:
        landed = super().worked(work, group)
        if self._start is not None:
            self._start = self._start - work.local.pseudo_gradient
        return landed


def _carry(monkeypatch: pytest.MonkeyPatch, carried: bool) -> type[ChainConfig]:
    """The protocol's inner mode for the whole test (reference.inner.CARRY_STATE, read by the
    node's config and the ledger's plan) and the chain config that goes with it."""
    import reference.inner

    monkeypatch.setattr(reference.inner, "CARRY_STATE", carried)
    return _KeepState if carried else _FreshState


@pytest.mark.slow  # ~15-60 s here: three overlapped rounds, every segment replayed
@pytest.mark.parametrize("carried", [False, True], ids=["fresh", "carried"])
def test_overlapped_rounds_pass_the_segment_audit_from_their_committed_origin(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
    carried: bool,
) -> None:
    """The node's default schedule (trainer.round.overlap): rounds 2 and 3 start from the last
    base less the node's own round r-1 progress, not from their attested base. The ledger finds
    it on the first deliveries, asks for boundary 0 in full and round r-1's boundary 0 and last
    boundary, checks the origin (ledger.judge.origin_check) and replays every segment from it:
    every round passes, with a fresh inner AdamW and with its state carried across rounds (the
    moments round r left, committed in round r+1's boundary 0)."""
    scores, states, _ = _audited_rounds(
        rig,
        rounds=3, overlap=True, config=_carry(monkeypatch, carried),
    )  # fmt: skip
    assert states[:2] == ["committed", "committed"] and states[2] in ("committed", "final")
    by_round = {s["round"]: s for s in sorted(scores, key=lambda s: s["round"])}
    assert sorted(by_round) == [1, 2, 3], scores
    for r, s in by_round.items():
        assert s["verified"] and int(s["reward"]) > 0, s
        assert "segment replay matches" in s["reason"] and s["reason"].count("segment ") >= 10, s
        if r > 1:  # started from round r-1's base less round r-1's committed progress
            assert "origin: the round started from the last round's base" in s["reason"], s
    assert "origin:" not in by_round[1]["reason"], by_round[1]  # from its attested base


@pytest.mark.parametrize(
    "carried", [pytest.param(False, marks=pytest.mark.slow), True], ids=["fresh", "carried"]
)
def test_bounded_rounds_pass_the_segment_audit_from_the_nodes_own_last_end(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
    carried: bool,
) -> None:
    """The bounded overlap (trainer.round.bounded): round 2 starts from the node's own end of
    round 1, which lands at round 2's boundary 1, where the weights move to the new base. The
    ledger finds the start on the first deliveries, checks it is round 1's committed last
    boundary (ledger.judge.origin_check) and replays segment 0 through the move; the node serves
    round 2's sketches against its attested base. Both rounds pass, every segment replayed, with
    a fresh inner AdamW and a carried one."""
    scores, states, _ = _audited_rounds(
        rig, rounds=2, bounded=True, config=_carry(monkeypatch, carried),
    )  # fmt: skip
    assert states[0] == "committed" and states[1] in ("committed", "final")
    by_round = {s["round"]: s for s in sorted(scores, key=lambda s: s["round"])}
    assert sorted(by_round) == [1, 2], scores
    for r, s in by_round.items():
        assert s["verified"] and int(s["reward"]) > 0, s
        assert "segment replay matches" in s["reason"] and s["reason"].count("segment ") >= 10, s
        if r > 1:
            assert "origin: the round started from the node's own end of the last round" in \
                s["reason"], s  # fmt: skip
    assert "origin:" not in by_round[1]["reason"], by_round[1]  # from its attested base


@pytest.mark.parametrize("carried", [False, True], ids=["fresh", "carried"])
def test_an_overlapped_node_that_starts_from_a_made_up_origin_is_caught(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
    carried: bool,
) -> None:
    """One segment drawn (the ledger's default): the round's deliveries show it did not start
    from its base, the origin check reads round 1's boundaries and finds the start is neither
    public point."""
    scores, _, ledger = _audited_rounds(
        rig,
        rounds=2, overlap=True, schedule=_MadeUpOrigin, audit_segments=1,
        config=_carry(monkeypatch, carried),
    )  # fmt: skip
    honest, cheat = sorted(scores, key=lambda s: s["round"])
    assert honest["verified"], honest  # round 1 starts from its attested base
    assert cheat["reason"].startswith("[audit_failed] the committed origin (boundary 0)"), cheat
    assert not cheat["verified"] and int(cheat["reward"]) == 0, cheat
    with Session(ledger.engine) as s:
        (fraud,) = s.exec(select(FraudRecord)).all()
    evidence = json.loads(fraud.evidence)
    assert fraud.round == 2 and "neither its attested base" in evidence["origin"], evidence
    assert evidence["origin_boundaries"] == {"2": [0], "1": [0, 10]}, evidence


def _inflating(node: NodeRunner) -> Overlap:
    """A node whose round 2 starts from twice the residual its round 1 left (mass it never
    sent, packed into round 2's packet); its schedule unchanged."""
    left = node.residuals.before

    def before(r: int) -> torch.Tensor | None:
        residual = left(r)
        return residual * 2 if residual is not None and r == 2 else residual

    node.residuals.before = before  # type: ignore[method-assign]
    return node.schedule


def _forged_packet_check(client: TestClient, node: str) -> tuple[str, str]:
    """The public auditor's sparse check (``coloco_cli.audit._sparse_exact``) of round 1's
    signed packet against round 2's delivered boundaries 0 and last."""
    from coloco_cli.audit import _delivered, _segment_audits, _sparse_exact, _tensors
    from ledger.judge.pseudo_gradients import decode_pseudo_gradient

    run = "0x" + RUN.hex()
    entry = _segment_audits(client, run, 2)[node.lower()]
    delivered = _delivered(client, entry)
    assert not isinstance(delivered, str), delivered
    scores = {r: next(s for s in client.get(f"/v1/runs/{run}/rounds/{r}").json()["scores"]
                      if s["node"].lower() == node.lower()) for r in (1, 2)}  # fmt: skip
    base = _tensors(client, scores[2]["base_checkpoint"])
    raw = _tensors(client, scores[1]["pseudo_gradient"])
    _, packet, bad = decode_pseudo_gradient(raw, base)
    assert bad is None and packet is not None, bad
    return _sparse_exact(client, run, entry, packet, delivered[1], base, None)


@pytest.mark.parametrize("cheat", [None, "bounded", "skips_a_step", "inflates_its_residual"])
def test_a_sparse_node_is_segment_audited_and_its_packet_recomputed(
    rig: Rig,
    cheat: str | None,
) -> None:
    """The sparse wire format (a governed vote, issue 27): an audited sparse node-round is
    segment-audited as a dense one is (its inner steps replayed from its committed states), its
    packet is recomputed bit for bit from boundary 0 and the last boundary, which the plan
    moves in full, and the residual it starts from must be what its round r-1 left, or zero
    (ledger.judge.sparse_check). Before, a sparse round was held only to the packet rule, and
    only once its boundaries had been asked for by someone else: the honest round was paid "not
    audited", and so were a node that skipped an inner step and one that inflated its residual
    (its packet is its committed states'). "bounded": an honest node on the bounded overlap
    (trainer.round.bounded), whose round 2 packet is measured from its attested base, not from
    boundary 0 (the ledger and ``coloco audit`` recompute it from that base)."""
    governance_sets(rig.chain, rig.deployment, "setWireFormat", 3)  # WireFormat.SPARSE
    honest = cheat in (None, "bounded")
    how: dict[str, Any] = {
        None: {},
        "bounded": {"bounded": True, "rounds": 3},  # round 3: the residual bounded round 2 left
        "skips_a_step": {"skip_call": 50 + 8,
                         "advance_of": lambda node: _skipping_step(node, 2, 7)},
        "inflates_its_residual": {"schedule": _inflating},
    }[cheat]  # fmt: skip
    public: list[dict[str, Any]] = []
    forged: list[tuple[str, str]] = []

    def audit(ledger: Ledger, client: TestClient, node: NodeRunner, lc: LedgerClient) -> None:
        """``coloco audit --run-id RUN --fraction 1`` re-checks the packets from public data."""
        from coloco_cli.audit import audit_rounds
        from coloco_cli.config_history import ConfigHistory

        views = ChainClient(rig.chain.rpc_url, rig.deployment)
        public.extend(audit_rounds(
            client, "0x" + RUN.hex(), fraction=1.0, model="tiny", tolerance=1e-2,
            corpus_dir=rig.corpus, data_root=Corpus.from_folder(rig.corpus).root,
            config_of=ConfigHistory(views, rig.deployment.deployment_block).get,
        ))  # fmt: skip
        if honest:  # round 1's packet held to round 2's committed states: not theirs
            forged.append(_forged_packet_check(client, rig.key.address))

    scores, states, _ = _audited_rounds(rig, then=audit, **how)
    one, two, *later = sorted(scores, key=lambda s: s["round"])
    verdicts = {v["round"]: v for v in public}
    assert verdicts[1]["verdict"] == "pass", verdicts[1]
    assert "sparse packet recomputed bit for bit" in verdicts[1]["reason"], verdicts[1]
    if honest:
        assert verdicts[2]["verdict"] == "pass", verdicts[2]["reason"]
        assert "starts from the residual its last round left" in verdicts[2]["reason"]
        ((verdict, why),) = forged
        assert verdict == "fail", why
        assert ("differs from the signed packet" if cheat is None
                else "neither its attested base") in why, why  # fmt: skip
    else:  # the auditor re-checks paid pairs: the ledger did not pay round 2
        assert 2 not in verdicts, verdicts[2]
    assert all(st in ("committed", "final") for st in states), (states, scores)
    for score in (one, two) if honest else (one,):
        assert score["verified"] and int(score["reward"]) > 0, score["reason"]
        assert "not confirmed" not in score["reason"], score["reason"]  # the ledger's bits
        assert score["reason"].count("segment replay matches") == 10, score["reason"]
        assert "sparse packet recomputed bit for bit" in score["reason"], score["reason"]
    if honest:
        assert "the round starts from a zero residual" not in two["reason"], two["reason"]
        assert "starts from the residual its last round left" in two["reason"], two["reason"]
        bounded = "origin: the round started from the node's own end" in two["reason"]
        assert bounded == (cheat == "bounded"), two["reason"]
        for score in later:  # from the residual round 2 left, measured from its attested base
            assert score["verified"] and int(score["reward"]) > 0, score["reason"]
            assert "starts from the residual its last round left" in score["reason"], score
            assert verdicts[score["round"]]["verdict"] == "pass", verdicts[score["round"]]
    elif cheat == "skips_a_step":  # step 7 of round 2, inside segment 1 (steps 5-9)
        assert two["reason"].startswith("[audit_failed] segment 1: segment replay of steps 5..9")
        assert "one-step verdict: step 7 of round 2" in two["reason"], two["reason"]
    else:
        assert two["reason"].startswith("[sparse_packet]"), two["reason"]
        assert "differs from what the node's round r-1 left" in two["reason"], two["reason"]
