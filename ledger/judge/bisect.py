"""A failed segment bisected to a one-step verdict, through requests the node answers.

When the segment replay of a node's round fails (ledger.judge.segments.check_entry), the audit
calls :func:`bisect_failed_segment` (through :func:`screened`) with the segment (steps
``lo .. hi``), the hashes of the node's two committed states at its ends (delivered boundaries)
and the rows the round read. The bisection (reference.bisect) then runs as a state machine stored in
``segment_bisection`` (so a restart resumes it):

1. the probe ``mid`` of ``(lo, hi)``: a boundary request with ``at_step = mid``
   (ledger.intake.boundaries; the node recomputes the state from its boundary and uploads it
   through the signed, quota-checked blob PUT; the delivery must name the blob's hash);
2. once delivered, the ledger replays ``mid - lo`` steps from the node's state at ``lo`` and
   narrows (``reference.bisect.narrow``);
3. at one step left, the one-step check (``ONE_STEP_TOLERANCE``) is the verdict: its evidence
   (reference.verdict: the two states and the batch by hash, the lr) is stored with the row,
   the batch as a blob, beside the round's fraud record; ``GET /v1/frauds/{id}/verdict`` serves
   it and ``coloco audit <fraud id>`` re-checks it in one step.

A probe the node does not deliver by its deadline ends the bisection ``missed``.
:func:`advance_bisections` moves every running bisection on (the ledger's periodic work calls it).

Wired live: the segment replay is a screen and the one-step verdict decides. A segment of an
audited node-round that fails its replay (ledger.judge.audits) is handed here while the round is
judged (:func:`screened`, ``ask``: the intake's, passed in through the judge's context; probes due
in the ledger's ``BOUNDARY_DEADLINE_S``, since the round waits on them); the round stays
``closing`` while its bisection runs (``RoundKeeper.audit_waits``), and is judged again when it
ends: ``done`` and the step differs -> the node fails with a fraud record naming the verdict;
``done`` and every step holds -> the segment's failure is excused (:func:`held`), the node is not
penalised; ``missed`` or ``error`` -> the node fails with the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlmodel import Session, select
from torch import Tensor

from ledger.core.blobstore import BlobStore
from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE
from ledger.core.models import BoundaryRequest, FraudRecord, SegmentBisection, utcnow
from ledger.judge.replay import ReplayInputs, round_rows
from protocol.blobs import encode_blob
from protocol.errors import ConfigError, LedgerError
from reference.bisect import (
    Bisection,
    agrees_between,
    check_step,
    narrow,
    next_probe,
    schedule_step,
    step_config,
)
from reference.inner import InnerConfig
from reference.model import GPTConfig
from reference.segment import State
from reference.verdict import make_evidence

log = logging.getLogger(__name__)

Ask = Callable[[SegmentBisection, int, float, datetime], BoundaryRequest]
"""``ask(bisection, at_step, deadline_s, now)``: the boundary request for the node's state after
``at_step`` steps (the same request when asked again), past-deadline ones marked ``missed``: the
intake's :func:`ledger.intake.boundaries.ask_probe` (the judge does not import the intake)."""

PROBE_DEADLINE_S = 600.0
"""Seconds a node has to recompute and upload one probe's state (a few of its inner steps), when
the caller names none; the audit's bisections (:func:`screened`) use the ledger's boundary
deadline, since the round's verdict waits on them."""

Rows = Tensor | Callable[[], Tensor]
"""A round's rows in reading order, or how to get them (read only when a replay needs them: a
bisection waiting on the node costs no corpus read)."""


@dataclass(frozen=True)
class FailedSegment:
    """A segment of a node-round that failed its replay (the screen, ledger.judge.audits), what
    :func:`bisect_failed_segment` needs: the segment after committed boundary ``boundary``
    (step counts ``lo .. hi``), the hashes of the node's delivered states at both ends, and the
    round's replay inputs (``ledger.judge.replay.ReplayInputs.to_json``: its rows, batch, lr
    and model preset)."""

    run_id: str
    round: int
    node: str
    boundary: int
    segment: tuple[int, int]
    start_hash: str
    end_hash: str
    replay: dict[str, Any]
    moved: tuple[str, str] | None = None
    """The blob hashes of the round's boundary 0 and attested base when the segment ends with
    the bounded overlap's move (segment 0 of a round that started from the node's own last end:
    its last step is checked moved, reference.bisect.check_step)."""


def bisect_failed_segment(
    session: Session,
    blobs: BlobStore,
    *,
    run_id: str,
    round_: int,
    node: str,
    boundary: int,
    segment: tuple[int, int],
    start_hash: str,
    end_hash: str,
    cfg: InnerConfig,
    model_cfg: GPTConfig,
    rows: Rows,
    ask: Ask,
    shard: dict[str, Any] | None = None,
    deadline_s: float = PROBE_DEADLINE_S,
    threads: int | None = None,
    replay: dict[str, Any] | None = None,
    moved: tuple[str, str] | None = None,
) -> SegmentBisection:
    """Start (or resume: one per node-round) the bisection of the failed segment ``segment``
    (step counts ``lo, hi``) after committed boundary ``boundary``, whose ends the node
    committed as ``start_hash`` and ``end_hash`` (blobs here). ``cfg``: the round's inner
    config (lr schedule, AdamW constants), ``model_cfg`` the run's model; ``rows``: the
    round's rows in reading order (or a callable giving them); ``replay``: the round's replay
    inputs, stored so that :func:`round_rows_of` rebuilds the rows after a restart;
    ``moved``: :attr:`FailedSegment.moved`."""
    lo, hi = segment
    next_probe(lo, hi)  # refuses lo >= hi
    run = run_id.lower()
    row = find(session, run, round_, node)
    if row is None:
        inputs = {"model": model_cfg.to_dict(), "inner": dataclasses.asdict(cfg),
                  "deadline_s": deadline_s, "shard": shard or {}}  # fmt: skip
        if replay is not None:
            inputs["replay"] = replay
        if moved is not None:
            inputs["moved"] = list(moved)
        row = SegmentBisection(
            run_id=run, round=round_, node=node, boundary=boundary, seg_lo=lo, seg_hi=hi,
            lo=lo, hi=hi, states=json.dumps({str(lo): start_hash, str(hi): end_hash}),
            inputs=json.dumps(inputs, sort_keys=True),
        )  # fmt: skip
        session.add(row)
        session.commit()
        session.refresh(row)
        log.info("bisecting node %s's round %d, steps %d..%d", node, round_, lo, hi)
    return advance(session, blobs, row, rows, ask=ask, threads=threads)


def find(session: Session, run: str, round_: int, node: str) -> SegmentBisection | None:
    """The bisection row of a node-round (one per node-round), if any."""
    return session.exec(
        select(SegmentBisection).where(
            SegmentBisection.run_id == run, SegmentBisection.round == round_,
            SegmentBisection.node == node,
        )
    ).first()  # fmt: skip


def _config(row: SegmentBisection) -> tuple[InnerConfig, GPTConfig, dict[str, Any]]:
    inputs = json.loads(row.inputs)
    inner = dict(inputs["inner"])
    inner["betas"] = tuple(inner["betas"])
    return InnerConfig(**inner), GPTConfig(**inputs["model"]), inputs


def _state(blobs: BlobStore, blob_hash: str) -> State:
    tensors = blobs.tensors(blob_hash)
    if tensors is None:
        raise LedgerError(f"the bisection's state {blob_hash} is not in the blob store",
                          code="not_found")  # fmt: skip
    return tensors


def advance(
    session: Session,
    blobs: BlobStore,
    row: SegmentBisection,
    rows: Rows,
    *,
    ask: Ask,
    threads: int | None = None,
    now: datetime | None = None,
) -> SegmentBisection:
    """Move ``row`` on as far as the node's delivered states allow; returns it (``running``
    with ``probe`` awaited, ``done`` with its evidence, or ``missed``)."""
    if row.state != "running":
        return row
    read: list[Tensor] = []

    def round_rows() -> Tensor:
        if not read:
            read.append(rows() if callable(rows) else rows)
        return read[0]

    cfg, model_cfg, inputs = _config(row)
    states: dict[str, str] = json.loads(row.states)
    moment = now or utcnow()
    for at in (row.seg_lo, row.seg_hi):
        # the audit moved one full state at most (ledger.judge.segments: the end's sketch, and
        # none at a public base): an end of the segment not in the store is asked for in full;
        # the node serves its committed boundary, which must hash to the leaf's state hash
        committed = states[str(at)]
        if blobs.exists(committed):
            continue
        if (delivered := _asked(row, at, ask, float(inputs["deadline_s"]), moment)) is None:
            return _save(session, row, states)
        if delivered.lower() != committed.lower():
            row.state, row.probe = "missed", at
            row.reason = (f"the node delivered a state after {at} steps ({delivered}) that "
                          f"is not its committed boundary ({committed})")  # fmt: skip
            return _save(session, row, states)
    while (mid := next_probe(row.lo, row.hi)) is not None:
        if str(mid) not in states:
            if (delivered := _asked(row, mid, ask, float(inputs["deadline_s"]), moment)) is None:
                return _save(session, row, states)
            states[str(mid)] = delivered
        err = agrees_between(_state(blobs, states[str(row.lo)]), _state(blobs, states[str(mid)]),
                             round_rows(), (row.lo, mid), cfg, model_cfg=model_cfg,
                             threads=threads)  # fmt: skip
        row.lo, row.hi = narrow(row.lo, row.hi, mid, err.value <= SEGMENT_TOLERANCE)
        row.probe = None
        _save(session, row, states)
    return _finish(session, blobs, row, states, round_rows(), cfg, model_cfg, inputs, threads)


def _asked(
    row: SegmentBisection, at: int, ask: Ask, deadline_s: float, moment: datetime
) -> str | None:
    """The hash of the node's delivered state after ``at`` steps; None while it is awaited
    (``row.probe``) or once it is past its deadline (``row`` then ``missed``)."""
    req = ask(row, at, deadline_s, moment)
    if req.state == "delivered" and req.state_hash:
        return req.state_hash
    row.probe = at
    if req.state == "missed" or moment >= req.deadline:
        row.state = "missed"
        row.reason = f"the node did not deliver its state after {at} steps in time"
    return None


def _finish(  # noqa: PLR0917 - the bisection's last step
    session: Session,
    blobs: BlobStore,
    row: SegmentBisection,
    states: dict[str, str],
    rows: Tensor,
    cfg: InnerConfig,
    model_cfg: GPTConfig,
    inputs: dict[str, Any],
    threads: int | None,
) -> SegmentBisection:
    before, after = _state(blobs, states[str(row.lo)]), _state(blobs, states[str(row.hi)])
    b = cfg.batch_size
    batch = rows[row.lo * b : row.hi * b]
    one = step_config(cfg, schedule_step(before))
    moved = inputs.get("moved") if row.hi == row.seg_hi else None  # the landing's move ends it
    move = None if not moved else (_state(blobs, moved[0]), _state(blobs, moved[1]))
    check = check_step(before, after, batch, one, model_cfg, tolerance=ONE_STEP_TOLERANCE,
                       threads=threads, move=move)  # fmt: skip
    probes = tuple(sorted(int(s) for s in states if row.seg_lo < int(s) < row.seg_hi))
    result = Bisection(row.lo, check, before, after, probes, one.lr)
    shard = {**inputs.get("shard", {}), "rows_from": row.lo * b, "rows": b}
    evidence, made = make_evidence(result, batch, cfg, model_cfg, run_id=row.run_id,
                                   round=row.round, node=row.node,
                                   segment=(row.seg_lo, row.seg_hi), shard=shard,
                                   moved=(moved[0], moved[1]) if moved else None)  # fmt: skip
    if not blobs.exists(evidence.batch):
        blobs.put(evidence.batch, encode_blob(made[evidence.batch]))
    row.state, row.probe, row.holds = "done", None, evidence.holds
    row.evidence, row.evidence_hash = evidence.text(), evidence.hash()
    row.reason = (
        f"step {row.lo} replays within {ONE_STEP_TOLERANCE:g} of the node's next state "
        f"(error {check.error.value:.3g}): the segment's failure is not one step's"
        if check.holds
        else f"step {row.lo} of round {row.round}: the replay of that one step from the node's "
        f"own state differs from its claimed next state by {check.error.value:.3g} > "
        f"{ONE_STEP_TOLERANCE:g}"
    )
    log.warning("one-step verdict for node %s round %d: %s", row.node, row.round, row.reason)
    return _save(session, row, states)


def _save(session: Session, row: SegmentBisection, states: dict[str, str]) -> SegmentBisection:
    row.states = json.dumps(states, sort_keys=True)
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def advance_bisections(
    session: Session,
    blobs: BlobStore,
    rows_of: Callable[[SegmentBisection], Tensor],
    *,
    ask: Ask,
    threads: int | None = None,
    now: datetime | None = None,
    errors: dict[int, str] | None = None,
) -> list[SegmentBisection]:
    """Move every running bisection on (``rows_of``: the round's rows of a bisection's node,
    read only when a replay needs them); what is stored is all it needs, so a restarted ledger
    resumes where it stopped. A bisection whose states cannot be replayed on the run's model
    (ConfigError: the node's state is not of its shape) ends ``error`` with the reason; any
    other failure leaves it running for the next pass, and the others go on (``errors``: the
    last failure of each, by row id, so a failure that persists is logged once)."""
    seen = errors if errors is not None else {}
    running = session.exec(
        select(SegmentBisection).where(SegmentBisection.state == "running")
    ).all()
    out: list[SegmentBisection] = []
    for row in running:
        try:
            out.append(advance(session, blobs, row, functools.partial(rows_of, row), ask=ask,
                               threads=threads, now=now))  # fmt: skip
        except ConfigError as exc:
            session.rollback()
            row.state, row.probe = "error", None
            row.reason = f"the node's states cannot be replayed on the run's model: {exc}"
            log.warning("bisection of node %s round %d stopped: %s", row.node, row.round,
                        row.reason)  # fmt: skip
            out.append(_save(session, row, json.loads(row.states)))
        except Exception as exc:  # isolate: this one is retried next pass, the others go on
            session.rollback()
            why = f"{type(exc).__name__}: {exc}"
            if seen.get(row.id or 0) != why:
                seen[row.id or 0] = why
                log.warning("bisection of node %s round %d not advanced (retried each pass): %s",
                            row.node, row.round, why)  # fmt: skip
    return out


def screened(
    session: Session,
    blobs: BlobStore,
    failed: FailedSegment,
    *,
    ask: Ask,
    rows: Rows,
    deadline_s: float,
    threads: int | None = None,
) -> SegmentBisection:
    """The one-step verdict of a segment that failed the segment replay (the screen) while its
    round is judged (ledger.judge.audits): the node-round's bisection started (its first request
    asked, due in ``deadline_s``: the ledger's boundary deadline, since the round waits on it),
    or the stored one moved on as far as the node's deliveries allow. A node-round has one
    bisection row: once its verdict holds for one segment and another drawn segment fails the
    screen, the row is re-armed on that segment and the held verdict kept in its inputs
    (:func:`held`). A state that does not fit the run's model ends it ``error``."""
    row = find(session, failed.run_id.lower(), failed.round, failed.node)
    if row is not None and row.boundary != failed.boundary and row.state == "done" and row.holds:
        _rearm(session, row, failed)
    elif row is not None and row.boundary != failed.boundary:
        return row  # an earlier segment's verdict that does not hold already decides
    inputs = replay_inputs(failed.replay)
    model_cfg = GPTConfig.preset(inputs.preset)
    batch = inputs.tokens // (inputs.inner_steps * model_cfg.seq_len)
    cfg = _inner_config(inputs.inner_steps, inputs.inner_lr, batch)
    try:
        return bisect_failed_segment(
            session, blobs, run_id=failed.run_id, round_=failed.round, node=failed.node,
            boundary=failed.boundary, segment=failed.segment, start_hash=failed.start_hash,
            end_hash=failed.end_hash, cfg=cfg, model_cfg=model_cfg, rows=rows, ask=ask,
            threads=threads, replay=failed.replay, deadline_s=deadline_s, moved=failed.moved,
            shard={"tokens": inputs.shard_tokens or inputs.tokens,
                   "mixture": list(inputs.mixture)},
        )  # fmt: skip
    except ConfigError as exc:
        session.rollback()
        row = find(session, failed.run_id.lower(), failed.round, failed.node)
        if row is None:
            raise
        row.state, row.probe = "error", None
        row.reason = f"the node's states cannot be replayed on the run's model: {exc}"
        return _save(session, row, json.loads(row.states))


def held(row: SegmentBisection | None) -> dict[int, str]:
    """The segments (by their start boundary) of a node-round whose one-step verdict holds, with
    the verdict's reason: the screen's failure of each is excused
    (``ledger.judge.segments.check_entry``)."""
    if row is None:
        return {}
    out = {int(h["boundary"]): str(h["reason"]) for h in json.loads(row.inputs).get("held", [])}
    if row.state == "done" and row.holds:
        out[row.boundary] = row.reason or "the one-step verdict holds"
    return out


def _rearm(session: Session, row: SegmentBisection, failed: FailedSegment) -> None:
    """Point the node-round's bisection, whose verdict held, at the next failed segment; the
    held verdict stays in its inputs (reason and evidence hash)."""
    inputs = json.loads(row.inputs)
    inputs.setdefault("held", []).append({
        "boundary": row.boundary, "segment": [row.seg_lo, row.seg_hi], "reason": row.reason,
        "evidence_hash": row.evidence_hash,
    })  # fmt: skip
    lo, hi = failed.segment
    inputs.pop("moved", None)
    if failed.moved is not None:
        inputs["moved"] = list(failed.moved)
    row.inputs = json.dumps(inputs, sort_keys=True)
    row.boundary, row.seg_lo, row.seg_hi, row.lo, row.hi = failed.boundary, lo, hi, lo, hi
    row.state, row.probe, row.holds = "running", None, None
    row.evidence = row.evidence_hash = row.reason = None
    _save(session, row, {str(lo): failed.start_hash, str(hi): failed.end_hash})
    log.info("bisecting node %s's round %d again, steps %d..%d", row.node, row.round, lo, hi)


def round_rows_of(corpus_dir: Path | None) -> Callable[[SegmentBisection], Tensor]:
    """:func:`advance_bisections`' ``rows_of``: a bisection's round rows, rebuilt from the
    replay inputs stored with it over the ledger's corpus (checked against the run's data
    root)."""

    def rows_of(row: SegmentBisection) -> Tensor:
        replay = json.loads(row.inputs).get("replay")
        if replay is None:
            raise ConfigError(
                f"the bisection of node {row.node}'s round {row.round} stores no replay inputs: "
                "its rows cannot be rebuilt (started by hand: pass rows_of yourself)"
            )
        return _rows(replay_inputs(replay), corpus_dir)

    return rows_of


def replay_inputs(doc: dict[str, Any]) -> ReplayInputs:
    return ReplayInputs.from_json(doc)


def _inner_config(steps: int, lr: float, batch: int) -> InnerConfig:
    """The round's AdamW as the segment audit replays it (the protocol's inner mode)."""
    from reference import inner

    return InnerConfig.protocol(steps, lr, batch, carried=inner.CARRY_STATE)


def _rows(inputs: ReplayInputs, corpus_dir: Path | None) -> Tensor:
    from ledger.judge.usefulness import corpus_of

    rows, _ = round_rows(inputs, corpus_of(corpus_dir, inputs.data_root))
    return rows


def verdict_of_fraud(session: Session, fraud_id: int) -> SegmentBisection | None:
    """The bisection of fraud record ``fraud_id``'s node-round (None: no record or none)."""
    fraud = session.get(FraudRecord, fraud_id)
    if fraud is None:
        return None
    return find(session, fraud.run_id, fraud.round, fraud.node)
