"""Fraud records: each failed replay audit of a round (:mod:`ledger.judge.audits`) stored once
per (run, round, node), with its evidence and the reward it withheld (never claimable). Each
becomes an on-chain slash proposal (:mod:`ledger.chain.slash`).
"""

from __future__ import annotations

from sqlmodel import Session, select

from ledger.core.models import FraudRecord, RoundState
from ledger.judge.entries import Entry


def record_frauds(session: Session, rnd: RoundState, entries: list[Entry]) -> None:
    """Add a :class:`FraudRecord` for every entry with a fraud not recorded yet (a round scored
    again keeps the first)."""
    for e in entries:
        if e.fraud is None:
            continue
        exists = session.exec(
            select(FraudRecord).where(
                FraudRecord.run_id == rnd.run_id,
                FraudRecord.round == rnd.round,
                FraudRecord.node == e.att.node,
            )
        ).first()
        if exists is None:
            session.add(
                FraudRecord(
                    run_id=rnd.run_id,
                    round=rnd.round,
                    node=e.att.node,
                    digest=e.att.digest,
                    evidence_hash=e.fraud.evidence_hash,
                    evidence=e.fraud.evidence,
                    withheld=e.fraud.withheld,
                )
            )
