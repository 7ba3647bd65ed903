"""A failed segment bisected to a one-step verdict, through requests the node answers.

When the segment audit of a node's round fails (ledger.judge.replay.audit_segment), the lead's
failure path calls :func:`bisect_failed_segment` with the segment (steps ``lo .. hi``), the hashes
of the node's two committed states at its ends (delivered boundaries) and the rows the round
read. The bisection (reference.bisect) then runs as a state machine stored in
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

A probe the node does not deliver by its deadline ends the bisection ``missed`` (the request's
own rule already fails the node: ledger.judge.boundaries). :func:`advance_bisections` moves every
running bisection on (the ledger's periodic work calls it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlmodel import Session, select
from torch import Tensor

from ledger.core.blobstore import BlobStore
from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE
from ledger.core.models import BoundaryRequest, FraudRecord, SegmentBisection, utcnow
from protocol.blobs import encode_blob
from protocol.errors import LedgerError
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
"""Seconds a node has to recompute and upload one probe's state (a few of its inner steps)."""


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
    rows: Tensor,
    ask: Ask,
    shard: dict[str, Any] | None = None,
    deadline_s: float = PROBE_DEADLINE_S,
    threads: int | None = None,
) -> SegmentBisection:
    """Start (or resume: one per node-round) the bisection of the failed segment ``segment``
    (step counts ``lo, hi``) after committed boundary ``boundary``, whose ends the node
    committed as ``start_hash`` and ``end_hash`` (blobs here). ``cfg``: the round's inner
    config (lr schedule, AdamW constants), ``model_cfg`` the run's model; ``rows``: the
    round's rows in reading order."""
    lo, hi = segment
    next_probe(lo, hi)  # refuses lo >= hi
    run = run_id.lower()
    row = _find(session, run, round_, node)
    if row is None:
        inputs = {"model": model_cfg.to_dict(), "inner": dataclasses.asdict(cfg),
                  "deadline_s": deadline_s, "shard": shard or {}}  # fmt: skip
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


def _find(session: Session, run: str, round_: int, node: str) -> SegmentBisection | None:
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
    rows: Tensor,
    *,
    ask: Ask,
    threads: int | None = None,
    now: datetime | None = None,
) -> SegmentBisection:
    """Move ``row`` on as far as the node's delivered states allow; returns it (``running``
    with ``probe`` awaited, ``done`` with its evidence, or ``missed``)."""
    if row.state != "running":
        return row
    cfg, model_cfg, inputs = _config(row)
    states: dict[str, str] = json.loads(row.states)
    moment = now or utcnow()
    while (mid := next_probe(row.lo, row.hi)) is not None:
        if str(mid) not in states:
            req = ask(row, mid, float(inputs["deadline_s"]), moment)
            if req.state == "delivered" and req.state_hash:
                states[str(mid)] = req.state_hash
            elif req.state == "missed" or moment >= req.deadline:
                row.state, row.probe = "missed", mid
                row.reason = f"the node did not deliver its state after {mid} steps in time"
                return _save(session, row, states)
            else:
                row.probe = mid
                return _save(session, row, states)
        err = agrees_between(_state(blobs, states[str(row.lo)]), _state(blobs, states[str(mid)]),
                             rows, (row.lo, mid), cfg, model_cfg=model_cfg,
                             threads=threads)  # fmt: skip
        row.lo, row.hi = narrow(row.lo, row.hi, mid, err.value <= SEGMENT_TOLERANCE)
        row.probe = None
        _save(session, row, states)
    return _finish(session, blobs, row, states, rows, cfg, model_cfg, inputs, threads)


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
    check = check_step(before, after, batch, one, model_cfg, tolerance=ONE_STEP_TOLERANCE,
                       threads=threads)  # fmt: skip
    probes = tuple(sorted(int(s) for s in states if row.seg_lo < int(s) < row.seg_hi))
    result = Bisection(row.lo, check, before, after, probes, one.lr)
    shard = {**inputs.get("shard", {}), "rows_from": row.lo * b, "rows": b}
    evidence, made = make_evidence(result, batch, cfg, model_cfg, run_id=row.run_id,
                                   round=row.round, node=row.node,
                                   segment=(row.seg_lo, row.seg_hi), shard=shard)  # fmt: skip
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
) -> list[SegmentBisection]:
    """Move every running bisection on (``rows_of``: the round's rows of a bisection's node);
    what is stored is all it needs, so a restarted ledger resumes where it stopped."""
    running = session.exec(
        select(SegmentBisection).where(SegmentBisection.state == "running")
    ).all()
    return [advance(session, blobs, row, rows_of(row), ask=ask, threads=threads, now=now)
            for row in running]  # fmt: skip


def verdict_of_fraud(session: Session, fraud_id: int) -> SegmentBisection | None:
    """The bisection of fraud record ``fraud_id``'s node-round (None: no record or none)."""
    fraud = session.get(FraudRecord, fraud_id)
    if fraud is None:
        return None
    return _find(session, fraud.run_id, fraud.round, fraud.node)
