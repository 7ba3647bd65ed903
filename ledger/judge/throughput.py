"""After admission: the throughput a node attests round by round, checked against its offer.

What it uses: the attestation's signed ``tokens``, and the time the node had for them, from when
it could start the round's work (its signed join of the round; without one its previous
attestation, or the run's start: the judge's ``start_of``,
``ledger.rounds.lifecycle.work_started``, as the token cap uses) to the attestation's arrival
(``received_at``), both on the ledger's clock (:func:`check_round`, a table view, counts from
``ledger_round.opened_at``: that is when the round's first message arrived, so it only suits
rounds opened by a join);
``flops_per_token`` is the run's model cost (6 x parameters for a training step). The attested
rate ``tokens * flops_per_token / seconds`` is compared with the offer's measured throughput
(the challenge's ``measured_flops``):

- above ``offered * CEILING``: the node attests more work than the hardware it proved can do
  (tokens it did not train, or hardware that is not the offer's). The seconds counted are at
  least what it had, so this never flags a node that was only fast;
- below ``offered * floor``: the node delivers less than it offered (it passed the challenge on
  hardware it no longer has, or shares it). ``floor`` is the run's expected utilisation (model
  FLOP/s over matmul FLOP/s), a per-run setting: a small model on a large device is far below
  its peak, so the default (:data:`FLOOR`) is low.

Each finding becomes a fraud record like a failed replay (unique per run, round and node: a
replay's record for the same slot is kept), so the slasher proposes the slash
(ledger/chain/slash.py).

Where rounds are judged (:func:`ledger.judge.verdicts.judge_round`), :func:`check_leased` runs
this for every node leased in the round (a ``LeaseOpened`` of the run whose window holds it)
and holding an offer (:func:`ledger.chain.leases.leased_offers`, in the round's context): a
finding fails the node's entry (check ``throughput``, before rewards are shared) with the
finding as its fraud evidence. So the round is neither rewarded nor a
completed round of the lease (its leaf counts verified attestations only:
:mod:`ledger.chain.leases`), and :func:`ledger.judge.fraud.record_frauds` stores the fraud
record the slasher proposes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Final

from sqlmodel import Session, select

from ledger.core.models import Attestation, FraudRecord, RoundState
from ledger.judge.entries import Entry, Fraud
from ledger.judge.tensors import Tensors
from protocol.eip712 import keccak256
from reference.challenge import SLACK

CEILING: Final = SLACK
FLOOR: Final = 0.02


@dataclass(frozen=True)
class Finding:
    run_id: str
    round: int
    node: str
    digest: str
    tokens: int
    seconds: float
    flops_per_token: float
    attested_flops: float
    offered_flops: float
    verdict: str  # "over" or "under"


def judge_rate(
    tokens: int,
    seconds: float,
    flops_per_token: float,
    offered_flops: float,
    *,
    floor: float = FLOOR,
    ceiling: float = CEILING,
) -> str | None:
    """ "over", "under" or None (consistent with the offer)."""
    rate = tokens * flops_per_token / max(seconds, 1e-9)
    if rate > offered_flops * ceiling:
        return "over"
    if rate < offered_flops * floor:
        return "under"
    return None


def check_round(
    session: Session,
    run_id: str,
    round_: int,
    offers: Mapping[str, float],
    flops_per_token: float,
    *,
    floor: float = FLOOR,
) -> list[Finding]:
    """The findings of one round for the nodes in ``offers`` (node -> offered FLOP/s)."""
    rnd = session.exec(
        select(RoundState).where(RoundState.run_id == run_id, RoundState.round == round_)
    ).first()
    if rnd is None:
        return []
    found = []
    for att in session.exec(
        select(Attestation).where(Attestation.run_id == run_id, Attestation.round == round_)
    ).all():
        offered = offers.get(att.node)
        if offered is None:
            continue
        seconds = (att.received_at - rnd.opened_at).total_seconds()
        verdict = judge_rate(int(att.tokens), seconds, flops_per_token, offered, floor=floor)
        if verdict is not None:
            found.append(
                Finding(
                    run_id,
                    round_,
                    att.node,
                    att.digest,
                    int(att.tokens),
                    seconds,
                    flops_per_token,
                    int(att.tokens) * flops_per_token / max(seconds, 1e-9),
                    offered,
                    verdict,
                )
            )
    return found


def record(session: Session, findings: list[Finding]) -> int:
    """A fraud record per finding whose slot has none yet; how many were added (the caller
    commits)."""
    added = 0
    for f in findings:
        exists = session.exec(
            select(FraudRecord).where(
                FraudRecord.run_id == f.run_id,
                FraudRecord.round == f.round,
                FraudRecord.node == f.node,
            )
        ).first()
        if exists is not None:
            continue
        text = json.dumps(
            {"kind": "attested_throughput", **asdict(f)}, sort_keys=True, separators=(",", ":")
        )
        session.add(
            FraudRecord(
                run_id=f.run_id,
                round=f.round,
                node=f.node,
                digest=f.digest,
                evidence_hash="0x" + keccak256(text.encode()).hex(),
                evidence=text,
            )
        )
        added += 1
    return added


def flops_per_token(tensors: Tensors | None) -> float | None:
    """6 x the model's parameters (a training step's FLOPs per token), or None without it."""
    if not tensors:
        return None
    return 6.0 * sum(t.numel() for t in tensors.values())


def check_leased(
    entries: list[Entry],
    rnd: RoundState,
    offers: Mapping[str, float],
    fpt: float | None,
    start_of: Callable[[Attestation], datetime],
) -> list[Finding]:
    """Fail the entries of leased nodes whose attested rate contradicts their offer (see the
    module docstring); the findings. ``offers``: node (lower-case) -> offered FLOP/s of the
    nodes leased in the round (:func:`ledger.chain.leases.leased_offers`); ``start_of``: when
    the node could start the round's work (its previous attestation, or the run's start: the
    round's ``opened_at`` is when its first message arrived, after the work was done)."""
    if fpt is None or not offers:
        return []
    found = []
    for e in entries:
        offered = offers.get(e.att.node.lower())
        if offered is None or not e.ok:
            continue
        seconds = (e.att.received_at - start_of(e.att)).total_seconds()
        if seconds <= 0:
            continue  # no time base (a clock step): nothing to judge the rate by
        verdict = judge_rate(int(e.att.tokens), seconds, fpt, offered)
        if verdict is None:
            continue
        rate = int(e.att.tokens) * fpt / max(seconds, 1e-9)
        f = Finding(
            rnd.run_id, rnd.round, e.att.node, e.att.digest, int(e.att.tokens), seconds, fpt,
            rate, offered, verdict,
        )  # fmt: skip
        text = json.dumps(
            {"kind": "attested_throughput", **asdict(f)}, sort_keys=True, separators=(",", ":")
        )
        e.fraud = Fraud(text, "0x" + keccak256(text.encode()).hex())
        bound = "above 1.5x" if verdict == "over" else "below the utilisation floor of"
        e.fail(
            "throughput",
            f"attested {rate:.3g} FLOP/s ({e.att.tokens} tokens in {seconds:.1f} s), "
            f"{bound} its offer's {offered:.3g} FLOP/s; fraud record {e.fraud.evidence_hash}",
        )
        found.append(f)
    return found
