"""The attested throughput of a leased node, round by round, against its offer: a node that
attests more than its proven hardware can do, or far less than it offered, gets a fraud record
(the slash path); a consistent one, or a node without an offer, does not."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from sqlmodel import Session, select

from bench.harness.nodes import h
from ledger.chain.leases import leased_offers
from ledger.core import db
from ledger.core.models import (
    Attestation,
    FraudRecord,
    FundingEvent,
    Join,
    MarketOffer,
    RoundState,
    utcnow,
)
from ledger.judge import throughput
from ledger.judge.entries import Entry
from ledger.judge.fraud import record_frauds
from ledger.rounds.lifecycle import work_started

RUN = h("run-throughput")
FPT = 6 * 1_000_000  # a 1M-parameter model: 6 FLOPs per parameter per token
OFFER = 1e12  # FLOP/s the challenge measured


def _att(node: str, tokens: int, at: object, i: int) -> Attestation:
    return Attestation(
        run_id=RUN,
        round=1,
        node=node,
        config_version=1,
        base_checkpoint=h("b"),
        pseudo_gradient=h(f"pg{i}"),
        data_shard=h(f"d{i}"),
        inner_steps=10,
        tokens=tokens,
        result_checkpoint=h("r"),
        trace_root=h(f"trace{i}"),
        digest=h(f"digest{i}"),
        signature="0x" + "11" * 65,
        received_at=at,
    )


def test_rates_over_the_proven_hardware_or_far_under_the_offer_are_recorded(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    opened = utcnow() - timedelta(seconds=100)
    honest, liar, swapped, unleased = ("0x" + c * 40 for c in "abcd")
    # 100 s at the offer: 1e14 FLOPs = 16.7M tokens; 30% utilisation is honest
    tokens = int(0.3 * OFFER * 100 / FPT)
    with Session(engine) as s:
        s.add(RoundState(run_id=RUN, round=1, opened_at=opened, deadline_at=utcnow()))
        at = opened + timedelta(seconds=100)
        s.add(_att(honest, tokens, at, 0))
        s.add(_att(liar, 6 * tokens, at, 1))  # 1.8x the offer: more than the hardware does
        s.add(_att(swapped, tokens // 100, at, 2))  # 0.3%: not the offered hardware
        s.add(_att(unleased, 100 * tokens, at, 3))  # no offer: not this check's business
        s.commit()
        offers = {honest: OFFER, liar: OFFER, swapped: OFFER}
        found = throughput.check_round(s, RUN, 1, offers, FPT)
        assert {(f.node, f.verdict) for f in found} == {(liar, "over"), (swapped, "under")}
        assert throughput.record(s, found) == 2
        s.commit()
        assert throughput.record(s, found) == 0  # once per slot
        frauds = s.exec(select(FraudRecord)).all()
        assert {f.node for f in frauds} == {liar, swapped}
        assert all(f.run_id == RUN and f.round == 1 for f in frauds)
    engine.dispose()


def test_the_bounds() -> None:
    assert throughput.judge_rate(100, 1.0, 1.0, 100.0) is None
    assert throughput.judge_rate(151, 1.0, 1.0, 100.0) == "over"
    assert throughput.judge_rate(150, 1.0, 1.0, 100.0) is None
    assert throughput.judge_rate(1, 1.0, 1.0, 100.0) == "under"
    assert throughput.judge_rate(2, 1.0, 1.0, 100.0) is None


def _lease(node: str, start: int, end: int, i: int) -> FundingEvent:
    args = {"node": node, "organiser": "0x" + "ee" * 20, "weiPerRound": "1", "startRound": start,
            "endRound": end, "escrow": str(end - start + 1)}  # fmt: skip
    return FundingEvent(contract="ComputeLeases", name="LeaseOpened", run_id=RUN, ref=h(f"l{i}"),
                        args=json.dumps(args), block_number=1, block_time=0, log_index=i,
                        tx_hash=h(f"tx{i}"))  # fmt: skip


def _offer(node: str, i: int) -> MarketOffer:
    return MarketOffer(digest=h(f"o{i}"), node=node, operator=node, device_kind=h("cpu"),
                       device_count=2, memory_bytes=1 << 30, flops=int(OFFER / 2), bandwidth=1,
                       region=h("eu"), price_per_device_hour="1", min_hours=1, expiry=2**40,
                       nonce=1, challenge=h("c"), signature="0x" + "11" * 65)  # fmt: skip


def test_the_round_judge_fails_a_leased_node_far_below_its_offer(tmp_path: Path) -> None:
    """Wired where rounds are judged: the leased node attesting 0.3% of its offer (2 devices x
    half of OFFER) fails its entry with check ``throughput`` and fraud evidence, so
    record_frauds writes the slash path's record and the round is not verified (not paid, not a
    completed round of its lease); the honest leased node, a node whose lease ended and an
    unleased node are untouched."""
    url = f"sqlite:///{tmp_path / 'l.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    opened = utcnow() - timedelta(seconds=100)
    honest, slow, ended, unleased = ("0x" + c * 40 for c in "abcd")
    tokens = int(0.3 * OFFER * 100 / FPT)
    with Session(engine) as s:
        rnd = RoundState(run_id=RUN, round=1, opened_at=opened, deadline_at=utcnow())
        s.add(rnd)
        s.add_all([_lease(honest, 1, 5, 0), _lease(slow, 1, 5, 1), _lease(ended, 0, 0, 2)])
        s.add_all([_offer(n, i) for i, n in enumerate((honest, slow, ended, unleased))])
        at = opened + timedelta(seconds=100)
        atts = [_att(n, t, at, i) for i, (n, t) in enumerate(
            [(honest, tokens), (slow, tokens // 300), (ended, tokens // 300),
             (unleased, tokens // 300)])]  # fmt: skip
        s.add_all(atts)
        s.commit()
        offers = leased_offers(s, RUN, 1)
        assert offers == {honest: OFFER, slow: OFFER}
        entries = [Entry(a) for a in atts]
        found = throughput.check_leased(entries, rnd, offers, FPT, lambda a: opened)
        assert [(f.node, f.verdict) for f in found] == [(slow, "under")]
        assert [e.check for e in entries] == [None, "throughput", None, None]
        assert entries[1].fraud is not None and '"attested_throughput"' in entries[1].fraud.evidence
        assert "below the utilisation floor" in entries[1].reason
        assert throughput.check_leased(entries[:1], rnd, offers, None, lambda a: opened) == []
        # no time base (work "started" after the attestation arrived): not judged
        assert throughput.check_leased([Entry(atts[1])], rnd, offers, FPT, lambda a: utcnow()) == []
        record_frauds(s, rnd, entries)
        s.commit()
        frauds = s.exec(select(FraudRecord)).all()
        assert [(f.node, f.round, f.evidence_hash) for f in frauds] == [
            (slow, 1, entries[1].fraud.evidence_hash)
        ]
    engine.dispose()


def test_flops_per_token_is_six_per_parameter() -> None:
    import torch

    assert throughput.flops_per_token({"w": torch.zeros(3, 4), "b": torch.zeros(4)}) == 96.0
    assert throughput.flops_per_token(None) is None


def test_a_rounds_work_is_timed_from_the_nodes_join_of_it(tmp_path: Path) -> None:
    """On the overlap schedule (the node's default) round 1 is attested after round 2's compute
    and the last round a moment after it: timed from the previous attestation, round 2 of an
    honest leased node would read as 0.2 s of work (far above its offer: slashed, as the demo
    showed). Timed from its signed join of the round (before it trains it, on either schedule)
    the rate is the work's; without a join the previous attestation still bounds it."""
    url = f"sqlite:///{tmp_path / 'l.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    node = "0x" + "ab" * 20
    t0 = utcnow() - timedelta(seconds=100)
    with Session(engine) as s:
        first = _att(node, 1000, t0 + timedelta(seconds=99.8), 0)  # round 1 lands late
        second = _att(node, 1000, t0 + timedelta(seconds=100), 1)  # round 2 right after
        second.round = 2
        s.add_all([first, second])
        s.commit()
        assert work_started(s, second, None) == first.received_at  # no join: 0.2 s
        s.add(Join(run_id=RUN, round=2, node=node, signature="0x01",
                   created_at=t0 + timedelta(seconds=50)))  # fmt: skip
        s.commit()
        started = work_started(s, second, None)
        assert (second.received_at - started).total_seconds() == 50.0
    engine.dispose()
