"""Round lifecycle: open -> closing (all expected nodes attested, or the deadline) -> scored.

Scoring runs levels 1 and 2 on every accepted attestation of a round once every earlier round of
the run is committed: base checkpoint equals the committed one, result checkpoint agrees with the
majority, the pseudo-gradient blob was uploaded (its id is its canonical hash, so it matches the
commitment), quality (zero/copy/usefulness), tokens within the round's time. Each attestation
gets a receipt: verified tokens, quality, reward and the reason. Settlement takes it from there.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

import torch
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from ledger.blobstore import BlobStore
from ledger.core.config import Settings
from ledger.indexer import Indexer
from ledger.intake import Intake
from ledger.models import Attestation, RoundState, Run, utcnow
from ledger.quality import Quality, UsefulnessFn, assess
from ledger.retry import Backoff
from ledger.scoring import attestations_root, cap_tokens, majority_checkpoint, split_rewards, weight
from trainer.commitment import as_flat

log = logging.getLogger(__name__)


class RoundKeeper:
    def __init__(
        self,
        engine: Engine,
        intake: Intake,
        indexer: Indexer,
        blobs: BlobStore,
        settings: Settings,
        *,
        usefulness: UsefulnessFn | None = None,
    ) -> None:
        self.engine = engine
        self.intake = intake
        self.indexer = indexer
        self.blobs = blobs
        self.settings = settings
        self.usefulness = usefulness
        self._first_pass = True
        self.backoff = Backoff("scoring of (run, round)")

    def close_due(self, now: datetime | None = None) -> list[tuple[str, int]]:
        """Move open rounds to closing when all expected nodes attested or the deadline passed.

        On SQLite (one worker) only rounds past their deadline or with new attestations
        (``Intake.dirty``) are looked at; the dirty set is taken *before* the open rounds are
        read, so a round opened and completed in between is seen on the next pass, not only at
        its deadline. On PostgreSQL other workers' attestations leave no trace here: every open
        round is looked at. Each round closes in its own transaction (an ``UPDATE`` of its row,
        which waits for the groups writing into it, see ``Intake._lock_rounds``), and the cache
        changes only after the commit.
        """
        now = now or utcnow()
        with self.intake.lock:
            dirty, self.intake.dirty = self.intake.dirty, set()
        with Session(self.engine) as session:
            open_rounds = session.exec(
                select(
                    RoundState.id, RoundState.run_id, RoundState.round, RoundState.deadline_at
                ).where(RoundState.state == "open")
            ).all()
        if self._first_pass or self.engine.dialect.name != "sqlite":
            self._first_pass = False
            dirty |= {(run_id, round_) for _, run_id, round_, _ in open_rounds}
        keys: list[tuple[str, int]] = []
        for row_id, run_id, round_, deadline_at in open_rounds:
            overdue = now >= deadline_at
            if not overdue and (run_id, round_) not in dirty:
                continue
            expected, complete = self._expected(run_id, round_)
            if complete or overdue:
                why = "every expected node attested" if complete else "deadline passed"
                if self._close(row_id, expected, why, now):
                    keys.append((run_id, round_))
        return keys

    def _close(self, row_id: int | None, expected: set[str], why: str, now: datetime) -> bool:
        with self.intake.lock, Session(self.engine) as session:
            row = session.get(RoundState, row_id, with_for_update=True)
            if row is None or row.state != "open":
                return False
            row.state, row.closed_at = "closing", now
            row.expected = json.dumps(sorted(expected))
            session.add(row)
            session.commit()
            key = (row.run_id, row.round)
            self.intake.round_states[key] = "closing"
            log.info("round %d of run %s closing: %s", key[1], key[0], why)
        return True

    def _expected(self, run_id: str, round_: int) -> tuple[set[str], bool]:
        """(expected members, whether all of them attested). Undeclared: never complete."""
        with Session(self.engine) as session:
            rows = session.exec(
                select(Attestation.node, Attestation.members).where(
                    Attestation.run_id == run_id, Attestation.round == round_
                )
            ).all()
        attested = {node for node, _ in rows}
        expected = set(attested)
        declared = False
        for _, members in rows:
            if members:
                declared = True
                expected.update(json.loads(members))
        return expected, declared and expected <= attested

    def score_ready(self) -> list[RoundState]:
        """Score every closing round whose earlier rounds are all committed on chain.

        A round whose scoring raises (a corrupt blob, a usefulness model error) is retried with
        backoff and reported; the other rounds are scored regardless.
        """
        scored: list[RoundState] = []
        with Session(self.engine, expire_on_commit=False) as session:
            closing = session.exec(
                select(RoundState)
                .where(RoundState.state == "closing")
                .order_by(col(RoundState.run_id), col(RoundState.round))
            ).all()
        for rnd in closing:
            key = (rnd.run_id, rnd.round)
            if not self.backoff.due(key):
                continue
            try:
                if self._ready(rnd):
                    scored.append(self.score_round(rnd))
            except Exception as exc:  # isolate: this round waits, the others go on
                self.backoff.failed(key, exc)
            else:
                self.backoff.succeeded(key)
        return scored

    def _ready(self, rnd: RoundState) -> bool:
        with Session(self.engine) as session:
            earlier = session.exec(
                select(RoundState.round).where(
                    RoundState.run_id == rnd.run_id,
                    RoundState.round < rnd.round,
                    col(RoundState.state).in_(("open", "closing", "scored")),
                )
            ).first()
            if earlier is not None:
                return False
            committed = session.exec(
                select(RoundState.round)
                .where(
                    RoundState.run_id == rnd.run_id,
                    RoundState.round < rnd.round,
                    col(RoundState.state).in_(("committed", "final")),
                    col(RoundState.tx_hash).is_not(None),
                )
                .order_by(col(RoundState.round).desc())
            ).first()
        last = self.indexer.snapshot.last_round.get(rnd.run_id)
        return last is not None and (committed is None or last >= committed)

    def score_round(self, rnd: RoundState) -> RoundState:
        snap = self.indexer.snapshot
        last = snap.last_round[rnd.run_id]
        base = snap.checkpoints[(rnd.run_id, last)]
        cfg = snap.config
        assert cfg is not None
        with Session(self.engine, expire_on_commit=False) as session:
            atts = list(
                session.exec(
                    select(Attestation)
                    .where(Attestation.run_id == rnd.run_id, Attestation.round == rnd.round)
                    .order_by(col(Attestation.id))
                ).all()
            )
            run = session.get(Run, rnd.run_id)
            reasons: dict[int, str] = {}
            base_ok = [a for a in atts if a.base_checkpoint == base]
            for a in atts:
                if a.base_checkpoint != base:
                    reasons[a.id or 0] = (
                        f"base checkpoint {a.base_checkpoint} is not the committed checkpoint "
                        f"{base} of round {last}"
                    )
            majority = majority_checkpoint([a.result_checkpoint for a in base_ok])
            agreeing = [a for a in base_ok if a.result_checkpoint == majority]
            for a in base_ok:
                if a.result_checkpoint != majority:
                    reasons[a.id or 0] = (
                        f"result checkpoint {a.result_checkpoint} disagrees with the majority "
                        f"{majority} ({len(agreeing)} of {len(base_ok)} nodes)"
                    )
            material: list[tuple[Attestation, dict[str, torch.Tensor]]] = []
            for a in agreeing:
                tensors = self.blobs.tensors(a.pseudo_gradient)
                if tensors is None:
                    reasons[a.id or 0] = (
                        f"pseudo-gradient blob {a.pseudo_gradient} was not uploaded: "
                        "PUT /v1/blobs/{hash} before attesting"
                    )
                else:  # an int8/fp32 commitment (trainer.commitment) is scored decoded
                    material.append((a, as_flat(tensors)))
            quality: dict[str, Quality] = assess(material, usefulness=self.usefulness)
            weights: dict[int, int] = {}
            for a in atts:
                aid = a.id or 0
                node = snap.nodes.get(a.node)
                a.payout = node.payout if node is not None else None
                if aid in reasons:
                    a.verified, a.verified_tokens, a.quality, a.reason = False, 0, 0.0, reasons[aid]
                    weights[aid] = 0
                    continue
                start = self._start_of(session, a, run)
                seconds = (a.received_at - start).total_seconds()
                verified = cap_tokens(a.tokens, seconds, self.settings.max_tokens_per_s)
                if a.inner_steps == 0:
                    verified = 0
                q = quality[a.node]
                a.verified, a.verified_tokens, a.quality = (
                    q.score > 0 and verified > 0,
                    verified,
                    q.score,
                )
                note = q.reason
                if verified < a.tokens:
                    note += (
                        f"; {a.tokens} tokens claimed in {seconds:.1f}s, credited {verified} "
                        f"(max {self.settings.max_tokens_per_s:g} tokens/s)"
                    )
                a.reason = note
                weights[aid] = weight(verified, q.score)
            rewards = split_rewards(cfg.reward_per_round, weights)
            for a in atts:
                a.reward = str(rewards.get(a.id or 0, 0))
                session.add(a)
            row = session.get(RoundState, rnd.id)
            assert row is not None
            row.checkpoint = majority
            row.total_work = str(sum(a.verified_tokens or 0 for a in atts if a.verified))
            row.attestations_root = (
                "0x" + attestations_root([bytes.fromhex(a.digest[2:]) for a in atts]).hex()
            )
            row.reward_per_round = str(cfg.reward_per_round)
            if majority is None:
                row.state = "final"
                row.note = "no attestation built on the committed checkpoint: nothing to commit"
            else:
                row.state = "scored"
            session.add(row)
            session.commit()
            log.info(
                "round %d of run %s scored: %d attestations, checkpoint %s",
                row.round,
                row.run_id,
                len(atts),
                majority,
            )
            return row

    def _start_of(self, session: Session, a: Attestation, run: Run | None) -> datetime:
        """When this node's work for the round began: its previous attestation, or the run start."""
        prev = session.exec(
            select(Attestation.received_at)
            .where(
                Attestation.run_id == a.run_id,
                Attestation.node == a.node,
                Attestation.round < a.round,
            )
            .order_by(col(Attestation.round).desc())
        ).first()
        if prev is not None:
            return prev
        return run.created_at if run is not None else a.received_at
