"""Round lifecycle: open -> closing (all expected nodes attested, or the deadline) -> scored.

Which nodes are expected is set by their signed joins (:mod:`ledger.intake.membership`). Scoring
runs levels 1-3 (:mod:`ledger.judge.verdicts`) on every accepted attestation of a round once every
earlier round of the run is committed; the checkpoint it commits is the ledger's own outer step.
A round whose segment audit asked nodes for boundary states stays closing until each is delivered
or past its deadline (:mod:`ledger.judge.segments`), and later rounds wait behind it. A segment
whose replay failed (the screen) is bisected to its one-step verdict while the round is judged,
and the round stays closing until the verdict is in (:mod:`ledger.judge.bisect`):
:meth:`RoundKeeper.advance_bisections`, the ledger's periodic work, moves each bisection on as the
node answers its probes, and the round is judged again once it ended.
Each attestation gets a receipt: verified tokens, quality, reward and the reason (the check that
decided it, with its evidence). Settlement takes it from there.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Engine, and_, func
from sqlmodel import Session, col, select

from ledger.chain.indexer import Indexer
from ledger.chain.leases import leased_offers
from ledger.chain.pools import compute_reward
from ledger.chain.settlement import add_rewards
from ledger.core.blobstore import BlobStore
from ledger.core.config import Settings
from ledger.core.models import (
    Attestation,
    BoundaryRequest,
    Join,
    RoundState,
    Run,
    SegmentBisection,
    utcnow,
)
from ledger.core.retry import Backoff
from ledger.core.round_book import RoundBook
from ledger.intake import boundaries
from ledger.intake.membership import Membership
from ledger.judge import bisect
from ledger.judge.claims import round_config
from ledger.judge.rules import attestations_root
from ledger.judge.segments import AuditPending
from ledger.judge.tensors import UsefulnessFn
from ledger.judge.verdicts import Context, judge_round, record_frauds

log = logging.getLogger(__name__)

# PostgreSQL: the open rounds' attestation counts are compared this often (stragglers)
FULL_SCAN_S = 5.0


class RoundKeeper:
    def __init__(
        self,
        engine: Engine,
        book: RoundBook,
        indexer: Indexer,
        blobs: BlobStore,
        settings: Settings,
        *,
        usefulness: UsefulnessFn | None = None,
        membership: Membership | None = None,
    ) -> None:
        self.engine = engine
        self.book = book  # the rounds' states this process knows (ledger.core.round_book)
        self.indexer = indexer
        self.blobs = blobs
        self.settings = settings
        self.usefulness = usefulness
        self.membership = membership
        self.audit_cpu_s = 0.0  # CPU seconds spent replaying (bench.redteam reads it)
        self.probe_cpu_s = 0.0  # CPU seconds of the first-step probe (level 2)
        self._first_pass = True
        self._scanned_at = float("-inf")  # last look at every open round (PostgreSQL)
        self._mark = 0  # highest attestation id looked at (PostgreSQL)
        self._counts: dict[tuple[str, int], int] = {}  # attestations per open round, last look
        self.backoff = Backoff("scoring of (run, round)")
        self.observe_scoring: Callable[[float], object] | None = None  # seconds per round
        self.bisect_errors: dict[int, str] = {}  # a running bisection's last failure, logged once

    def close_due(self, now: datetime | None = None) -> list[tuple[str, int]]:
        """Move open rounds to closing when all expected nodes attested or the deadline passed.

        Only rounds past their deadline or with new attestations are looked at: the joins of
        those before their deadline in one query, then one query for the attestations of each
        round that has joins or is overdue. New attestations: this process's
        (:meth:`RoundBook.take_written`, taken *before* the open rounds are read, so a round
        opened and completed in between is seen on the next pass, not only at its deadline); on
        PostgreSQL also other workers', as the rounds of rows above the highest attestation id
        seen last pass, and every
        :data:`FULL_SCAN_S` the open rounds whose count of attestations changed (a row whose id
        was drawn before that mark but committed after it).
        Each round closes in its own transaction (an ``UPDATE`` of its row, which waits for the
        groups writing into it, see ``Intake._insert``), and the round book changes only after
        the commit.
        """
        now = now or utcnow()
        dirty = self.book.take_written()
        shared = self.engine.dialect.name != "sqlite"  # other workers may write
        with Session(self.engine) as session:
            open_rounds = session.exec(
                select(
                    RoundState.id, RoundState.run_id, RoundState.round, RoundState.deadline_at
                ).where(RoundState.state == "open")
            ).all()
            if shared and open_rounds:
                dirty |= self._written_since_last_pass(session)
                if time.monotonic() - self._scanned_at >= FULL_SCAN_S:
                    self._scanned_at = time.monotonic()
                    dirty |= self._counts_changed(session)
        if self.membership is not None:
            dirty |= self.membership.due(now)
        if self._first_pass:
            self._first_pass = False
            dirty |= {(run_id, round_) for _, run_id, round_, _ in open_rounds}
        candidates = [
            (row_id, run_id, round_, now >= deadline_at)
            for row_id, run_id, round_, deadline_at in open_rounds
            if now >= deadline_at or (run_id, round_) in dirty
        ]
        early = self._may_close_early([(r, n) for _, r, n, overdue in candidates if not overdue])
        keys: list[tuple[str, int]] = []
        for row_id, run_id, round_, overdue in candidates:
            if not overdue and (run_id, round_) not in early:
                continue  # open membership: it closes at its deadline, nothing more to read
            expected, complete = self._expected(run_id, round_, now)
            if complete or overdue:
                why = "every expected node attested" if complete else "deadline passed"
                if self._close(row_id, expected, why, now):
                    keys.append((run_id, round_))
        return keys

    def _written_since_last_pass(self, session: Session) -> set[tuple[str, int]]:
        """Rounds of the attestations stored (by any worker) above the last pass's mark."""
        rows = session.exec(
            select(Attestation.run_id, Attestation.round, func.max(Attestation.id))
            .where(col(Attestation.id) > self._mark)
            .group_by(col(Attestation.run_id), col(Attestation.round))
        ).all()
        self._mark = max([self._mark, *(int(top or 0) for _, _, top in rows)])
        return {(run_id, int(round_)) for run_id, round_, _ in rows}

    def _counts_changed(self, session: Session) -> set[tuple[str, int]]:
        """Open rounds whose number of attestations changed since the last full look (one
        grouped query, whatever the number of open rounds)."""
        rows = session.exec(
            select(Attestation.run_id, Attestation.round, func.count())
            .join(
                RoundState,
                and_(
                    col(RoundState.run_id) == col(Attestation.run_id),
                    col(RoundState.round) == col(Attestation.round),
                ),
            )
            .where(RoundState.state == "open")
            .group_by(col(Attestation.run_id), col(Attestation.round))
        ).all()
        counts = {(run_id, int(round_)): int(n) for run_id, round_, n in rows}
        changed = {key for key, n in counts.items() if self._counts.get(key) != n}
        self._counts = counts
        return changed

    def _close(self, row_id: int | None, expected: set[str], why: str, now: datetime) -> bool:
        with self.book.locked(), Session(self.engine) as session:
            row = session.get(RoundState, row_id, with_for_update=True)
            if row is None or row.state != "open":
                return False
            row.state, row.closed_at = "closing", now
            row.expected = json.dumps(sorted(expected))
            session.add(row)
            session.commit()
            key = (row.run_id, row.round)
            self.book.closing(key)
            log.info("round %d of run %s closing: %s", key[1], key[0], why)
        return True

    def _may_close_early(self, keys: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Which rounds before their deadline can close early: only rounds with joins (their
        members all attested); one with none closes at its deadline. Read before the rounds'
        attestations, in one query for all of them, so that the dirty rounds of an
        open-membership run cost one query per pass, not one or two per round (every round a
        node attests into is dirty until its deadline)."""
        if self.membership is None or not keys:
            return set()
        return {key for key, joined in self.membership.refresh(keys).items() if joined}

    def _expected(self, run_id: str, round_: int, now: datetime) -> tuple[set[str], bool]:
        """(expected members, whether the round may close early): see
        :mod:`ledger.intake.membership`."""
        with Session(self.engine) as session:
            rows = session.exec(
                select(Attestation.node, Attestation.members).where(
                    Attestation.run_id == run_id, Attestation.round == round_
                )
            ).all()
        declared = {node: json.loads(m) if m else None for node, m in rows}
        if self.membership is None:
            return set(declared), False
        return self.membership.complete(run_id, round_, declared, now)

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
                if self._ready(rnd) and not self.audit_waits(rnd):
                    started = time.perf_counter()
                    scored.append(self.score_round(rnd))
                    if self.observe_scoring is not None:
                        self.observe_scoring(time.perf_counter() - started)
            except AuditPending as wait:  # judged once the boundaries land or are due
                self.request_boundaries(wait)
                log.info("%s", wait)
            except Exception as exc:  # isolate: this round waits, the others go on
                self.backoff.failed(key, exc)
            else:
                self.backoff.succeeded(key)
        return scored

    def request_boundaries(self, wait: AuditPending) -> None:
        """Ask the nodes for the boundary states (and sketches) the round's segment audit
        needs (and, for a round that did not start from its base, the node's round r-1
        boundaries its origin check reads)."""
        with Session(self.engine) as session:
            due = self.settings.boundary_deadline_s
            for node, wanted in wait.wanted.items():
                for b, what in wanted:
                    boundaries.request_boundary(
                        session, wait.run_id, wait.round, node, b, deadline_s=due, at_step=what
                    )
            for node, wanted in wait.earlier.items():  # round r-1: origin, carried AdamW
                for b, what in wanted:
                    boundaries.request_boundary(
                        session, wait.run_id, wait.round - 1, node, b, deadline_s=due,
                        at_step=what,
                    )  # fmt: skip

    def advance_bisections(self, now: datetime | None = None) -> list[SegmentBisection]:
        """Move every running bisection on (the ledger's periodic work): ask the node's next
        state, replay what it delivered, end on the one-step verdict."""
        with Session(self.engine, expire_on_commit=False) as session:
            return bisect.advance_bisections(
                session, self.blobs, bisect.round_rows_of(self.settings.usefulness_corpus),
                ask=boundaries.ask_probe(session), threads=self._audit_threads(), now=now,
                errors=self.bisect_errors,
            )  # fmt: skip

    def _audit_threads(self) -> int | None:
        return self.settings.audit_threads or os.cpu_count()

    def audit_waits(self, rnd: RoundState, now: datetime | None = None) -> bool:
        """Whether ``rnd``'s audit asked for a boundary still pending and not due (the due ones
        are marked missed first), or bisects a segment that failed its replay (the periodic
        :meth:`advance_bisections` moves it on): its verdicts wait for the delivery, the
        deadline or the one-step verdict."""
        moment = now or utcnow()
        with Session(self.engine) as session:
            boundaries.expire(session, now=moment)
            row = session.exec(
                select(BoundaryRequest.id).where(
                    BoundaryRequest.run_id == rnd.run_id,
                    BoundaryRequest.round == rnd.round,
                    BoundaryRequest.state == "pending",
                    col(BoundaryRequest.deadline) > moment,
                )
            ).first()
            bisecting = session.exec(
                select(SegmentBisection.id).where(
                    SegmentBisection.run_id == rnd.run_id.lower(),
                    SegmentBisection.round == rnd.round,
                    SegmentBisection.state == "running",
                )
            ).first()
        return row is not None or bisecting is not None

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
            members = self.membership.members(rnd.run_id, rnd.round) if self.membership else None
            # judged under the config version the round trained with (claims.round_config);
            # paid the compute pool's share of the reward in force now (the ownership split)
            share = replace(
                round_config(atts, snap.configs, cfg, members=members, base=base),
                reward_per_round=compute_reward(self.indexer.chain, cfg.reward_per_round),
            )
            ctx = Context(
                settings=self.settings, blobs=self.blobs, config=share, base=base, last_round=last,
                members=members, usefulness=self.usefulness, configs=snap.configs,
                start_of=lambda a: self._start_of(session, a, run),
                domain=self.indexer.chain.domain,
                leased=leased_offers(session, rnd.run_id, rnd.round),
                probes=boundaries.ask_probe,
            )  # fmt: skip
            judged = judge_round(session, rnd, atts, ctx)
            self.audit_cpu_s += judged.audit_cpu_s
            self.probe_cpu_s += judged.probe_cpu_s
            for e in judged.entries:
                a = e.att
                node = snap.nodes.get(a.node)
                a.payout = node.payout if node is not None else None
                a.verified = e.ok and e.quality > 0 and e.tokens > 0
                a.verified_tokens = e.tokens if e.ok else 0
                a.quality = e.quality if e.ok else 0.0
                a.reason = e.reason
                a.reward = str(e.reward)
                session.add(a)
            earned: dict[str, int] = {}
            for a in atts:
                if a.payout is not None and a.reward is not None:
                    earned[a.payout] = earned.get(a.payout, 0) + int(a.reward)
            add_rewards(session, earned)  # the rewards tree's totals, in this transaction
            record_frauds(session, rnd, judged.entries)
            majority = judged.checkpoint
            row = session.get(RoundState, rnd.id)
            assert row is not None
            row.checkpoint = majority
            row.total_work = str(sum(a.verified_tokens or 0 for a in atts if a.verified))
            row.attestations_root = (
                "0x" + attestations_root([bytes.fromhex(a.digest[2:]) for a in atts]).hex()
            )
            row.reward_per_round = str(cfg.reward_per_round)
            row.note = judged.note
            if majority is None:
                row.state = "final"
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
        return work_started(session, a, run)


def work_started(session: Session, a: Attestation, run: Run | None) -> datetime:
    """When this node's work for the round began, at the earliest: its signed join of the
    round (recorded before it trains it, on either schedule); without one its previous
    attestation, or the run start. Not the previous attestation first: on the overlap
    schedule round r-1 is attested after round r's compute, and a round that lands at once
    (the last, before a hold or a member change) is attested a moment after it, so the
    time counted would be a fraction of a second (an honest leased node's rate would read
    as far above its offer: ledger.judge.throughput)."""
    joined = session.exec(
        select(Join.created_at).where(
            Join.run_id == a.run_id, Join.round == a.round, Join.node == a.node
        )
    ).first()
    if joined is not None:
        return joined
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
