"""The attested throughput of a leased node, round by round, against its offer: a node that
attests more than its proven hardware can do, or far less than it offered, gets a fraud record
(the slash path); a consistent one, or a node without an offer, does not."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlmodel import Session, select

from bench.harness.nodes import h
from ledger.core import db
from ledger.core.models import Attestation, FraudRecord, RoundState, utcnow
from ledger.judge import throughput

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
