"""Level 3, the replay audit: which (node, round) pairs are replayed, and the replay of each.

A pair is replayed when its draw falls in the sampled fraction or when an earlier check marked
it suspicious (a copy's residual cosine, an odd norm or direction, the first-step probe, a node
new to the run: probation). A whole-round replay that does not match fails the entry with a fraud
record: the evidence, enough for anyone to re-run the replay (:mod:`ledger.judge.fraud` stores
it). A node-round with a committed trace gets the segment audit, whose replay is a screen: a
segment that fails it is bisected while the round waits, and its one-step verdict decides
(:mod:`ledger.judge.bisect`): a step that differs (or a probe not answered) fails the node with a
fraud record naming the verdict, a verdict that holds passes it. A failure that is no segment's
replay (boundary 0 not the base, the last boundary not the pseudo-gradient) fails at once.

The draw (:func:`sampled`) is keccak of the round's audit seed and the node's address: nothing the
node signs enters it, so signing the same work under another ``configVersion`` (or any other
field) cannot re-roll it. The seed (:func:`round_seed`) is 32 random bytes the ledger draws when
it first judges the round, after the round closed (no attestation is accepted after that), and
stores before any replay, so a restart judges with the same seed; it is written into every
audit's receipt and fraud evidence, so anyone can recompute the selection.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from ledger.core.models import (
    STATE_REQUEST,
    Attestation,
    BoundaryRequest,
    KeyValue,
    RoundState,
    SegmentBisection,
    utcnow,
)
from ledger.judge import bisect, continuity, segments
from ledger.judge.bisect import FailedSegment
from ledger.judge.boundaries import check_boundaries
from ledger.judge.entries import Context, Entry, Fraud
from ledger.judge.origin_check import OriginVerdict, audit_bases, check_origin
from ledger.judge.replay import ReplayInputs, audit, round_rows
from ledger.judge.sparse_check import carries_residual, delivered_start, sparse_round
from ledger.judge.tensors import Tensors
from protocol.attestation import ATTESTATION_ATTRS
from protocol.eip712 import keccak256
from protocol.errors import CheckpointError
from reference.settings import WireFormat

if TYPE_CHECKING:
    from torch import Tensor

    from reference.data import Corpus

log = logging.getLogger(__name__)
NO_TRACE = "0x" + "00" * 32  # an attestation's traceRoot when it commits no trace


def sampled(seed: bytes, node: str, fraction: float) -> bool:
    """The audit draw of ``node`` in a round: keccak of the round's seed and the node's address,
    below ``fraction`` of 2**256."""
    if fraction <= 0:
        return False
    address = bytes.fromhex(node.removeprefix("0x").lower())
    draw = int.from_bytes(keccak256(seed + address + b"coloco-audit"), "big")
    return draw < int(fraction * (1 << 256))


def _seed_key(run_id: str, round_: int) -> str:
    return "audit:" + keccak256(run_id.lower().encode() + b":" + str(round_).encode()).hex()[:56]


def stored_seed(session: Session, run_id: str, round_: int) -> bytes | None:
    """The round's audit seed if it was drawn (:func:`round_seed`), else None: read only, so a
    reader never draws it."""
    row = session.get(KeyValue, _seed_key(run_id, round_))
    return None if row is None else bytes.fromhex(row.value[2:])


def round_seed(session: Session, rnd: RoundState) -> bytes:
    """The round's audit seed: drawn at random the first time a closed round is judged, and
    committed at once (in its own transaction) so no retry or restart draws another."""
    if rnd.state == "open":
        raise ValueError(
            f"round {rnd.round} of run {rnd.run_id} is open: its audit seed is drawn only after "
            "it closes, when no attestation can be added"
        )
    key = _seed_key(rnd.run_id, rnd.round)
    with Session(session.get_bind()) as own:
        row = own.get(KeyValue, key)
        if row is None:
            own.add(KeyValue(key=key, value="0x" + os.urandom(32).hex()))
            try:
                own.commit()
            except IntegrityError:  # another worker drew it first: its seed stands
                own.rollback()
            row = own.get(KeyValue, key)
        assert row is not None
        return bytes.fromhex(row.value[2:])


def track_records(session: Session, rnd: RoundState, nodes: list[str]) -> dict[str, int]:
    """How many earlier rounds of this run each node was verified in."""
    rows = session.exec(
        select(Attestation.node).where(
            Attestation.run_id == rnd.run_id,
            Attestation.round < rnd.round,
            col(Attestation.verified).is_(True),
            col(Attestation.node).in_(nodes),
        )
    ).all()
    out: dict[str, int] = {}
    for node in rows:
        out[str(node)] = out.get(str(node), 0) + 1
    return out


def replay_audits(
    session: Session, entries: list[Entry], ctx: Context, rnd: RoundState, base: Tensors
) -> float:
    """Replay the sampled and the suspicious entries (nodes with the shortest track record
    first); a mismatch fails the entry with its fraud evidence. Returns the replays' CPU
    seconds."""
    if ctx.settings.audit_fraction <= 0 or ctx.settings.usefulness_model is None:
        return 0.0
    from ledger.judge.usefulness import corpus_of, matching_shard
    from reference.manifest import DataMismatch

    try:
        corpus = corpus_of(ctx.settings.usefulness_corpus, bytes(ctx.config.data_root))
    except DataMismatch as exc:  # replaying on other bytes would fail honest nodes
        log.error("replay audits skipped: %s", exc.message)
        for e in entries:
            if e.ok:
                e.reason += "; not audited: the ledger's corpus is not the run's pinned data"
        return 0.0

    cpu = 0.0
    track = track_records(session, rnd, [e.att.node for e in entries])
    for e in entries:  # nodes joining a running run (round 1's founders: the sample only)
        new = track.get(e.att.node, 0) < ctx.settings.audit_probation_rounds
        if e.ok and new and rnd.round > 1:
            e.suspicious.append("new to the run (probation)")
    seed = round_seed(session, rnd)
    cleared: set[str] = set()  # nodes whose copy partner failed: the pair is explained
    waiting: list[str] = []  # nodes whose requested boundaries the segment audit waits for
    wanted: dict[str, list[segments.Need]] = {}  # what the segment audit is still to ask for
    # of round r-1: an overlapped round's origin, a carried round's last AdamW state
    earlier: dict[str, list[segments.Need]] = {}

    def why_of(e: Entry) -> str:
        reasons = [w for w in e.suspicious if not (e.att.node in cleared and "cosine" in w)]
        return (
            f"sampled, seed 0x{seed.hex()}" if not reasons else "suspicious: " + "; ".join(reasons)
        )

    for e in sorted(entries, key=lambda x: (track.get(x.att.node, 0), x.id)):
        if not e.ok or e.tensors is None:
            continue
        reasons = [w for w in e.suspicious if not (e.att.node in cleared and "cosine" in w)]
        if not (reasons or sampled(seed, e.att.node, ctx.settings.audit_fraction)):
            continue
        sparse = e.packet is not None and e.packet.fmt is WireFormat.SPARSE
        if sparse and e.att.trace_root in (None, "", NO_TRACE):
            sparse_round(session, e, ctx, rnd, base)  # no trace: nothing to ask for
            continue
        inputs = ReplayInputs(
            run_id=bytes.fromhex(rnd.run_id[2:]),
            round=rnd.round,
            node=e.att.node,
            tokens=e.att.tokens,
            inner_steps=e.att.inner_steps,
            inner_lr=ctx.config.inner_lr,
            mixture=tuple(ctx.config.data_mixture_bps),
            preset=ctx.settings.usefulness_model,
            data_root=bytes(ctx.config.data_root),
            shard_tokens=matching_shard(
                e.att, tuple(ctx.config.data_mixture_bps), ctx.config.inner_steps
            )
            or 0,
        )
        if e.att.trace_root not in (None, "", NO_TRACE):
            try:
                wait = _segment_audit(session, e, ctx, rnd, base, inputs, corpus, seed,
                                      why_of(e), wanted, earlier)  # fmt: skip
            except CheckpointError as exc:  # the ledger's preset is not this run's model
                log.error("segment audit does not fit the run's model: %s", exc)
                e.reason += "; not audited: the ledger's model preset does not fit this run"
                continue
            spent, waits = wait
            cpu += spent
            if waits:
                waiting.append(e.att.node)
                continue
            if e.ok and sparse:  # the packet, exact, from the boundaries the plan moved
                # round r-1 is read only when the round starts with a residual (rule 2)
                start = delivered_start(session, ctx, e, rnd.round)
                residual = carries_residual(start)
                previous = (
                    segments.previous_round(
                        session, ctx, rnd.run_id, rnd.round, e.att.node, earlier
                    )
                    if residual
                    else None
                )
                if residual and previous is None:
                    e.reason += f"; audit ({why_of(e)}) waits for round {rnd.round - 1}'s " \
                                "boundaries (the residual it left)"  # fmt: skip
                    waiting.append(e.att.node)
                    continue
                sparse_round(session, e, ctx, rnd, base, previous, start)
            if not e.ok:  # a failed audit explains its copy partner's cosine
                cleared.update(_partners(e))
            continue
        try:  # no trace committed (an older node): the whole round is replayed
            verdict = audit(
                base,
                e.tensors,
                inputs,
                corpus,
                tolerance=ctx.settings.audit_tolerance,
                packet=e.packet,
            )
        except CheckpointError as exc:  # the ledger's preset is not this run's model
            log.error("replay audit does not fit the run's model: %s", exc)
            e.reason += "; not audited: the ledger's model preset does not fit this run"
            continue
        cpu += verdict.cpu_seconds
        why = (
            f"sampled, seed 0x{seed.hex()}" if not reasons else "suspicious: " + "; ".join(reasons)
        )
        if verdict.passed:
            e.replayed = True
            e.reason += f"; audited ({why}): {verdict.reason}"
            continue
        cleared.update(_partners(e))
        _seal(e, {
            **_attested(e, inputs, why, seed),
            "base_checkpoint": ctx.base,
            "submitted": e.att.pseudo_gradient,
            "replayed": verdict.replayed_hash,
            "relative_error": verdict.rel_error,
            "tolerance": ctx.settings.audit_tolerance,
        }, verdict.reason, why)  # fmt: skip
    check_boundaries(entries, segments.round_requests(session, rnd), utcnow())
    if waiting:
        raise segments.AuditPending(rnd.run_id, rnd.round, wanted, waiting, earlier)
    return cpu


def _partners(e: Entry) -> set[str]:
    return {w.rsplit(" ", 1)[-1] for w in e.suspicious if "cosine" in w}


def _segment_audit(  # noqa: PLR0917 - the round's audit inputs, passed on
    session: Session,
    e: Entry,
    ctx: Context,
    rnd: RoundState,
    base: Tensors,
    inputs: ReplayInputs,
    corpus: Corpus,
    seed: bytes,
    why: str,
    wanted: dict[str, list[segments.Need]],
    earlier: dict[str, list[segments.Need]] | None = None,
) -> tuple[float, bool]:
    """The segment audit of ``e`` (:mod:`ledger.judge.segments`): the boundaries it needs and
    has not asked for yet go into ``wanted``; once all are delivered the drawn segments are
    replayed. A round whose deliveries show it did not start from its attested base (the
    overlap schedule: :func:`ledger.judge.segments.starts_elsewhere`) is audited from its
    committed origin: boundary 0 in full, and round r-1's boundary 0 and last boundary
    (``earlier``) for the origin check (ledger.judge.origin_check). The replay is a screen: a
    segment that fails it is bisected to its one-step verdict, which decides
    (:func:`_verdict`). Returns the replays' CPU seconds and whether the audit waits (for
    boundaries, or for the verdict; a withheld boundary is failed by ``check_boundaries``)."""
    assert e.tensors is not None
    sparse = e.packet is not None and e.packet.fmt is WireFormat.SPARSE
    plan = segments.plan(seed, e.att.node, e.att.inner_steps, ctx.config.trace_interval,
                         ctx.settings.audit_segments, exact=sparse)  # fmt: skip
    requests = segments.existing(session, rnd.run_id, rnd.round, e.att.node, plan.needed)
    missing = [b for b in plan.needed if b not in requests]
    if missing:
        wanted[e.att.node] = missing
        before = segments.previous_attestation(session, rnd.run_id, rnd.round, e.att.node)
        if not plan.public_start:  # asked for with them: round r-1's last AdamW state
            segments.ask_earlier(earlier, e.att.node, continuity.previous_needs(before, ctx))
        if sparse and before is not None:  # and round r-1's states: the residual it left
            segments.ask_earlier(earlier, e.att.node, segments.previous_needs(before, ctx))
        return 0.0, True
    if segments.pending(requests, utcnow()):
        e.reason += f"; audit ({why}) waits for boundaries {[b for b, _ in plan.needed]}"
        return 0.0, True
    if not segments.delivered(requests):
        return 0.0, False  # withheld: check_boundaries fails the entry
    states = segments.load_states(ctx.blobs, requests)
    check_base, moved_to = base, None
    if segments.starts_elsewhere(plan, requests, states, base):
        if not plan.origin:  # found now: ask for the origin (boundary 0 in full) and round r-1
            plan = replace(plan, origin=True)
            requests = segments.existing(session, rnd.run_id, rnd.round, e.att.node,
                                         plan.needed)  # fmt: skip
            missing = [b for b in plan.needed if b not in requests]
            if missing:
                wanted[e.att.node] = missing
                return 0.0, True
        prev = segments.previous_round(session, ctx, rnd.run_id, rnd.round, e.att.node, earlier)
        if prev is None:
            e.reason += f"; audit ({why}) of a round not started from its base waits for the " \
                        "node's round r-1 boundaries"  # fmt: skip
            return 0.0, True
        if isinstance(prev, str):  # withheld, or no round r-1 to start from
            verdict = OriginVerdict(False, "", prev)
        else:
            states = segments.load_states(ctx.blobs, requests)
            origin = states[(0, STATE_REQUEST)]
            verdict = check_origin(origin, base, prev)
            check_base, moved_to = audit_bases(verdict, origin, base)
        if not verdict.passed:
            return _origin_failed(e, rnd, inputs, plan, why, seed, verdict.reason), False
        e.reason += f"; origin: {verdict.reason}"
    if not plan.public_start:  # a carried AdamW: the round starts from its own previous state
        kept = continuity.check(session, ctx, rnd.run_id, rnd.round, e.att.node, requests,
                                states, earlier)  # fmt: skip
        if kept is None:
            e.reason += f"; audit ({why}) waits for the node's round {rnd.round - 1} last boundary"
            return 0.0, True
        if not kept.passed:
            _seal(e, {
                **_attested(e, inputs, why, seed), "trace_root": e.att.trace_root,
                "continuity": kept.reason, **kept.evidence,
            }, kept.reason, why)  # fmt: skip
            return 0.0, False
        e.reason += f"; {kept.reason}"
    threads = ctx.settings.audit_threads or os.cpu_count()
    cpu = 0.0
    with Session(session.get_bind(), expire_on_commit=False) as own:  # the bisection's rows
        row = bisect.find(own, rnd.run_id.lower(), rnd.round, e.att.node)
        for _ in range(len(plan.segments) + 1):  # once more for each verdict that holds
            outcome = segments.check_entry(
                e.tensors, e.packet, check_base, inputs, corpus, plan, requests, states,
                tolerance=ctx.settings.segment_tolerance, threads=threads,
                excused=bisect.held(row), moved_to=moved_to,
            )  # fmt: skip
            cpu += outcome.cpu_seconds
            if outcome.passed:
                e.replayed = True
                e.reason += f"; audited ({why}): {outcome.reason}"
                return cpu, False
            failed = _failed_segment(e, rnd, inputs, plan, requests, outcome.evidence,
                                     moved=moved_to is not None)  # fmt: skip
            if failed is None or ctx.probes is None:  # not a segment's replay: no step to name
                _fraud(e, ctx, rnd, inputs, seed, why, outcome.evidence, outcome.reason)
                return cpu, False
            row = bisect.screened(
                own, ctx.blobs, failed, ask=ctx.probes(own),
                rows=functools.partial(_rows, inputs, corpus),
                deadline_s=ctx.settings.boundary_deadline_s, threads=threads,
            )  # fmt: skip
            if not (row.state == "done" and row.holds and row.boundary == failed.boundary):
                break  # a verdict that holds excuses the segment: the screen runs again
    assert row is not None  # the loop ran the screen and started or read the bisection
    return cpu, _verdict(e, ctx, rnd, inputs, seed, why, outcome, row)


def _rows(inputs: ReplayInputs, corpus: Corpus) -> Tensor:
    return round_rows(inputs, corpus)[0]


def _verdict(  # noqa: PLR0917 - the failed screen and its bisection
    e: Entry,
    ctx: Context,
    rnd: RoundState,
    inputs: ReplayInputs,
    seed: bytes,
    why: str,
    outcome: segments.SegmentOutcome,
    row: SegmentBisection,
) -> bool:
    """What the bisection of the segment that failed the screen decides; whether the audit
    still waits for it (``running``: the round stays closing). ``done`` with a step that differs,
    ``missed`` (the node did not answer a probe by its deadline, or answered another state) and
    ``error`` fail the node with a fraud record: the screen already failed, so a node that
    stalls its verdict is not let off the slash."""
    if row.state == "running":
        e.reason += (f"; audit ({why}): {outcome.reason}; waits for its one-step verdict "
                     f"(steps {row.lo}..{row.hi}, probe {row.probe})")  # fmt: skip
        return True
    verdict = {
        "one_step_verdict": row.evidence_hash, "one_step_state": row.state,
        "one_step_reason": row.reason,
    }  # fmt: skip
    if row.state == "done" and not row.holds:
        why_failed = f"{outcome.reason}; one-step verdict: {row.reason}"
    else:
        why_failed = f"{outcome.reason}; no one-step verdict ({row.state}): {row.reason}"
    _fraud(e, ctx, rnd, inputs, seed, why, {**outcome.evidence, **verdict}, why_failed)
    return False


def _fraud(  # noqa: PLR0917 - the failed audit's parts
    e: Entry,
    ctx: Context,
    rnd: RoundState,
    inputs: ReplayInputs,
    seed: bytes,
    why: str,
    evidence: dict[str, object],
    reason: str,
) -> None:
    """Fail ``e`` ``audit_failed`` with its fraud record (``evidence``: the segment audit's)."""
    _seal(e, {
        **_attested(e, inputs, why, seed),
        "base_checkpoint": ctx.base,
        "submitted": e.att.pseudo_gradient,
        "trace_root": e.att.trace_root,
        **evidence,
    }, reason, why)  # fmt: skip


def _attested(e: Entry, inputs: ReplayInputs, why: str, seed: bytes) -> dict[str, object]:
    """What every fraud record holds: the signed attestation, how to replay its round, and
    why and under which seed it was audited."""
    return {
        "attestation": {k: getattr(e.att, k) for k in ATTESTATION_ATTRS},
        "digest": e.att.digest,
        "signature": e.att.signature,
        "replay_inputs": inputs.to_json(),
        "selected": why,
        "audit_seed": "0x" + seed.hex(),
    }


def _seal(e: Entry, record: dict[str, object], reason: str, why: str) -> None:
    """Fail ``e`` ``audit_failed`` with ``record`` as its fraud record (named by its keccak)."""
    text = json.dumps(record, sort_keys=True, default=str)
    e.fraud = Fraud(text, "0x" + keccak256(text.encode()).hex())
    e.fail("audit_failed", f"{reason}; fraud record {e.fraud.evidence_hash} (selected: {why})")


def _origin_failed(  # noqa: PLR0917 - the failed check's parts
    e: Entry,
    rnd: RoundState,
    inputs: ReplayInputs,
    plan: segments.SegmentPlan,
    why: str,
    seed: bytes,
    reason: str,
) -> float:
    """Fail ``e``: its round started from a point that is neither its attested base nor the
    overlap schedule's start (ledger.judge.origin_check), with the evidence to re-check it."""
    _seal(e, {
        **_attested(e, inputs, why, seed),
        "trace_root": e.att.trace_root,
        "origin": reason,
        "origin_boundaries": {str(rnd.round): [0], str(rnd.round - 1): [0, plan.last]},
    }, reason, why)  # fmt: skip
    return 0.0


def _failed_segment(  # noqa: PLR0917 - the failed audit's parts
    e: Entry,
    rnd: RoundState,
    inputs: ReplayInputs,
    plan: segments.SegmentPlan,
    requests: dict[segments.Need, BoundaryRequest],
    evidence: dict[str, object],
    *,
    moved: bool = False,
) -> FailedSegment | None:
    """The failed segment handed over to the bisection (ledger.judge.bisect): its steps and the
    node's delivered states at both ends; None when the failure is not a segment's replay (the
    last boundary or boundary 0 that is not the base: no step to name). ``moved``: the round
    is on the bounded overlap, whose segment 0 ends with the landing's move (its last step is
    checked moved from boundary 0 to the attested base: ``FailedSegment.moved``)."""
    j = evidence.get("segment")
    if not isinstance(j, int) or j not in plan.segments:
        return None
    first, steps = plan.span(j)
    # a boundary's state hash, as delivered in full or with its sketch (the leaf names it)
    hashes = {b: r.state_hash for (b, _), r in requests.items() if r.state_hash}
    start, end = hashes.get(j), hashes.get(j + 1)
    if start is None or end is None:  # a public boundary 0 moves nothing: no hash delivered
        return None
    return FailedSegment(
        run_id=rnd.run_id, round=rnd.round, node=e.att.node, boundary=j,
        segment=(first, first + steps), start_hash=start, end_hash=end,
        replay=inputs.to_json(),
        moved=(start, str(e.att.base_checkpoint)) if moved and j == 0 else None,
    )  # fmt: skip
