"""Levels 1-3 for one round: membership, derived work, tensors, copies, usefulness, the ledger's own
outer step, and the replay audit of a sample plus every suspicious node. One verdict per
attestation, each with the check that decided it and its evidence (the receipt's reason).

Order (cheap before expensive): membership, zero result checkpoint, base checkpoint, work derived
from the governed settings, blob uploaded, tensors match the model and are finite and non-zero,
magnitude within [floor, ceiling] x the round's median norm, not a copy (this round, the previous
K rounds, the previous round's mean, the node's own earlier updates), usefulness on the node's
shard (with the audit on, an update that does not lower its own-shard loss is replayed: honest
work is paid at the usefulness floor, anything else fails the audit), then the outer step over
the members' pseudo-gradients (each result checkpoint must equal it), the replay audit, and the
committed step: over the members' pseudo-gradients that are safe to apply (the model's shapes,
finite, within the magnitude bounds): what the members' all-reduce did, minus what would harm the
model (nodes resync from ``GET /v1/runs/{run}/outer/{round}``). Rewards
go to verified work only.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import torch
from sqlmodel import Session, col, select

from ledger.chain.client import ConfigView
from ledger.core.blobstore import BlobStore
from ledger.core.config import Settings
from ledger.core.models import Attestation, FraudRecord, Rejection, RoundState
from ledger.judge.outer_step import OuterResult, load_momentum, outer_step, store
from ledger.judge.replay import ReplayInputs, audit
from ledger.judge.rules import cap_tokens, majority_checkpoint, split_rewards, weight
from ledger.judge.steps import LINF_BAND, FirstStepProbe, linf_ratio
from ledger.judge.steps import linf as steps_linf
from ledger.judge.tensors import (
    ShardMismatch,
    Tensors,
    UsefulnessFn,
    canonical_flat,
    cosine,
    integrity,
    median,
    residual,
    unit,
)
from protocol.eip712 import keccak256
from protocol.errors import CheckpointError

log = logging.getLogger(__name__)

ZERO = "0x" + "00" * 32
SUSPICIOUS_NORM = (0.75, 1.33)
MIN_FOR_RESIDUALS = 4  # nodes in a round needed to remove the shared component
SMALL_ROUND_COPY_COSINE = 0.999  # outside this band of the median norm: replay-audited
ALIGNMENT_FLOOR = 0.1  # raw cosine with the round's other updates below this: replay-audited


@dataclass
class Entry:
    att: Attestation
    check: str | None = None
    reason: str = ""
    tensors: Tensors | None = None
    flat: torch.Tensor | None = None
    quality: float = 0.0
    tokens: int = 0
    suspicious: list[str] = field(default_factory=list)
    packet: Any = None  # the all-reduce packet of a commitment blob (reference.commitment)
    unhelpful: str | None = None  # usefulness <= 0 while the audit can replay: it decides
    replayed: bool = False  # the replay audit matched
    reward: int = 0
    fraud: dict[str, Any] | None = None

    def fail(self, check: str, reason: str) -> None:
        if self.check is None:
            self.check, self.reason = check, f"[{check}] {reason}"

    @property
    def ok(self) -> bool:
        return self.check is None

    @property
    def id(self) -> int:
        return self.att.id or 0


@dataclass
class Judgement:
    entries: list[Entry]
    checkpoint: str | None
    note: str
    audit_cpu_s: float = 0.0
    probe_cpu_s: float = 0.0  # the first-step probe (level 2; a replay is audit_cpu_s)


@dataclass
class Context:
    settings: Settings
    blobs: BlobStore
    config: ConfigView
    base: str
    last_round: int
    members: frozenset[str] | None
    usefulness: UsefulnessFn | None
    start_of: Any  # (Attestation) -> datetime
    model: Tensors | None = None  # the base checkpoint's tensors (set by judge_round)


def judge_round(
    session: Session, rnd: RoundState, atts: list[Attestation], ctx: Context
) -> Judgement:
    entries = [Entry(a) for a in atts]
    base_tensors = ctx.blobs.tensors(ctx.base)
    ctx.model = base_tensors
    _level1(entries, ctx)
    _equivocation(entries, session, rnd)
    _tensors(entries, ctx, base_tensors)
    _magnitude(entries, ctx, session, rnd)
    _copies(entries, ctx, session, rnd)
    _aligned(entries, ctx)
    _usefulness(entries, ctx)
    probe_cpu = _inner_steps(entries, ctx, base_tensors)
    for e in entries:
        if e.ok:
            seconds = (e.att.received_at - ctx.start_of(e.att)).total_seconds()
            e.tokens = cap_tokens(e.att.tokens, seconds, ctx.settings.max_tokens_per_s)
            if e.tokens < e.att.tokens:
                e.reason += (
                    f"; {e.att.tokens} tokens claimed in {seconds:.1f}s, credited {e.tokens} "
                    f"(max {ctx.settings.max_tokens_per_s:g} tokens/s)"
                )
    if base_tensors is None:
        return _legacy(entries, ctx)
    momentum = load_momentum(session, ctx.blobs, rnd.run_id, ctx.last_round)
    allreduced = _result_check(entries, ctx, base_tensors, momentum)
    cpu = _audit(session, entries, ctx, rnd, base_tensors)
    _settle_unhelpful(entries)
    _split(entries, ctx)
    if not any(e.ok and e.quality > 0 and e.tokens > 0 for e in entries):
        return Judgement(
            entries, None, "no pseudo-gradient was accepted: nothing to commit", cpu, probe_cpu
        )
    group = _declared_group(entries)
    safe = sorted(
        (
            e
            for e in entries
            if e.tensors is not None and e.check != "magnitude" and e.att.node in group
        ),
        key=lambda e: e.att.node,
    )
    if allreduced is not None and [e.att.node for e in safe] == allreduced[0]:
        result = allreduced[1]
    else:
        result = _step(ctx, base_tensors, momentum, safe)
    store(session, ctx.blobs, rnd.run_id, rnd.round, result)
    note = (
        f"checkpoint computed by the ledger: outer step over {len(safe)} members' "
        f"pseudo-gradients ({sum(e.ok for e in entries)} paid)"
    )
    return Judgement(entries, result.checkpoint, note, cpu, probe_cpu)


# --- level 1 ------------------------------------------------------------------------------------


def _level1(entries: list[Entry], ctx: Context) -> None:
    tps = ctx.settings.tokens_per_step
    for e in entries:
        a = e.att
        if ctx.members is not None and a.node not in ctx.members:
            e.fail("not_a_member", f"node did not join round {a.round} before it started")
        elif a.result_checkpoint == ZERO:
            e.fail("zero_checkpoint", "resultCheckpoint is zero: no model has that hash")
        elif a.base_checkpoint != ctx.base:
            e.fail(
                "stale_base",
                f"base checkpoint {a.base_checkpoint} is not the committed "
                f"checkpoint {ctx.base} of round {ctx.last_round}",
            )
        elif not 1 <= a.inner_steps <= ctx.config.inner_steps:
            e.fail(
                "work_mismatch",
                f"innerSteps {a.inner_steps} is outside 1..TrainingConfig.innerSteps "
                f"{ctx.config.inner_steps} (a time-boxed node declares the steps it ran)",
            )
        elif tps is not None and a.tokens != a.inner_steps * tps:
            e.fail(
                "work_mismatch",
                f"tokens {a.tokens} are not innerSteps x batch x seqLen = "
                f"{a.inner_steps} x {tps} = {a.inner_steps * tps}",
            )
        elif tps is None and (a.inner_steps == 0 or a.tokens % a.inner_steps):
            e.fail(
                "work_mismatch",
                f"tokens {a.tokens} are not a whole number of {a.inner_steps} inner steps",
            )


def _tensors(entries: list[Entry], ctx: Context, model: Tensors | None) -> None:
    """Load every member's blob; a zero update still took part in the all-reduce (kept for the
    members' step), a wrong-shaped or non-finite one could not have."""
    for e in entries:
        if e.check == "not_a_member":
            continue
        raw = ctx.blobs.tensors(e.att.pseudo_gradient)
        if raw is None:
            e.fail(
                "missing_blob",
                f"pseudo-gradient blob {e.att.pseudo_gradient} was not uploaded: "
                "PUT /v1/blobs/{hash} before attesting",
            )
            continue
        tensors, e.packet, why = _decode(raw, model)
        if why is not None:
            e.fail("shape_mismatch", why)
            continue
        bad = integrity(tensors, model)
        if bad is None or bad[0] == "zero_update":
            e.tensors = tensors
            e.flat = canonical_flat(tensors)
        if bad is not None:
            e.fail(*bad)


def _load(ctx: Context, blob: str) -> Tensors | None:
    """An earlier pseudo-gradient blob as named tensors (a commitment decoded), or None."""
    raw = ctx.blobs.tensors(blob)
    if raw is None:
        return None
    tensors, _, bad = _decode(raw, ctx.model)
    return None if bad is not None else tensors


def _decode(raw: Tensors, model: Tensors | None) -> tuple[Tensors, Any, str | None]:
    """(named tensors, the packet or None, why it is malformed): a commitment blob is decoded
    and laid out by the model's parameter shapes; named fp32 tensors are taken as they are."""
    from reference.commitment import FLAT, is_commitment, packet_of
    from reference.outer import FlatLayout

    if not is_commitment(dict(raw)):
        return raw, None, None
    try:
        from reference.codec import decode

        packet = packet_of(dict(raw))
        flat = decode(packet)
    except Exception as exc:  # EncodingError / codec checks: a malformed commitment
        return raw, None, f"commitment blob does not decode: {exc}"
    if model is None:
        return {FLAT: flat}, packet, None
    layout = FlatLayout({n: t.shape for n, t in model.items()})
    if flat.numel() != layout.numel:
        return raw, None, f"commitment has {flat.numel()} values, the model {layout.numel}"
    return layout.unflatten(flat), packet, None


# --- level 2 ------------------------------------------------------------------------------------


def _history(
    session: Session, rnd: RoundState, k: int, nodes: set[str] | None = None
) -> list[tuple[int, str, str]]:
    """(round, node, pseudo-gradient hash) of the previous ``k`` rounds' verified attestations,
    plus the last five verified ones of each node in ``nodes`` (its own earlier updates)."""
    out: set[tuple[int, str, str]] = set()
    if k > 0:
        rows = session.exec(
            select(Attestation.round, Attestation.node, Attestation.pseudo_gradient).where(
                Attestation.run_id == rnd.run_id,
                Attestation.round < rnd.round,
                Attestation.round >= rnd.round - k,
                col(Attestation.verified).is_(True),
            )
        ).all()
        out.update((int(r), str(n), str(p)) for r, n, p in rows)
    for node in sorted(nodes or ()):
        own = session.exec(
            select(Attestation.round, Attestation.node, Attestation.pseudo_gradient)
            .where(
                Attestation.run_id == rnd.run_id,
                Attestation.node == node,
                Attestation.round < rnd.round,
                col(Attestation.verified).is_(True),
            )
            .order_by(col(Attestation.round).desc())
            .limit(5)
        ).all()
        out.update((int(r), str(n), str(p)) for r, n, p in own)
    return sorted(out)


def _equivocation(entries: list[Entry], session: Session, rnd: RoundState) -> None:
    """A second, different attestation signed by the node for this round (refused at intake as
    ``conflicting_attestation``, its signature checked): the node equivocated."""
    rows = session.exec(
        select(Rejection.node, Rejection.digest).where(
            Rejection.run_id == rnd.run_id,
            Rejection.round == str(rnd.round),
            Rejection.code == "conflicting_attestation",
            col(Rejection.digest).is_not(None),
        )
    ).all()
    other = {str(n): str(d) for n, d in rows}
    for e in entries:
        if e.att.node in other and other[e.att.node] != e.att.digest:
            e.fail(
                "equivocation",
                f"the node signed two different attestations for round {rnd.round}: "
                f"{e.att.digest} and {other[e.att.node]}",
            )


def _magnitude(entries: list[Entry], ctx: Context, session: Session, rnd: RoundState) -> None:
    live = [e for e in entries if e.ok and e.flat is not None]
    norms = [float(e.flat.norm()) for e in live if e.flat is not None]
    if len(norms) < 3:  # too few to judge by: the previous rounds' accepted norms
        for _, _, pg in _history(session, rnd, 1):
            t = _load(ctx, pg)
            if t is not None:
                norms.append(float(canonical_flat(t).norm()))
    if len(norms) < 3:
        return
    ref = median(norms)
    lo, hi = ctx.settings.magnitude_floor * ref, ctx.settings.magnitude_ceiling * ref
    for e in live:
        n = float(e.flat.norm()) if e.flat is not None else 0.0
        if not SUSPICIOUS_NORM[0] * ref <= n <= SUSPICIOUS_NORM[1] * ref:
            e.suspicious.append(f"norm {n:.4g} is {n / ref:.2f}x the round's median")
        if not lo <= n <= hi:
            e.fail(
                "magnitude",
                f"pseudo-gradient norm {n:.4g} is outside [{lo:.4g}, {hi:.4g}] "
                f"(x{ctx.settings.magnitude_floor:g}..x"
                f"{ctx.settings.magnitude_ceiling:g} the median {ref:.4g})",
            )


def _aligned(entries: list[Entry], ctx: Context) -> None:
    """Honest updates of a round share a direction (raw cosine 0.3-0.75 with the previous round's
    mean on the red team's real nodes); noise and zeros do not (0.00). An update nearly
    orthogonal to the mean of the round's other updates is suspicious: the replay decides."""
    live = [e for e in entries if e.ok and e.flat is not None]
    if len(live) < MIN_FOR_RESIDUALS or not _can_audit(ctx):
        return
    for e in live:
        others = [x.flat for x in live if x is not e and x.flat is not None]
        assert e.flat is not None
        c = cosine(e.flat, torch.stack(others).mean(0))
        if c < ALIGNMENT_FLOOR:
            e.suspicious.append(f"raw cosine {c:.3f} with the mean of the round's other updates")


def _direction(flats: list[torch.Tensor]) -> torch.Tensor | None:
    return unit(torch.stack(flats).mean(0)) if flats else None


def _copies(entries: list[Entry], ctx: Context, session: Session, rnd: RoundState) -> None:
    """Residual cosines: the shared component is the mean of the *other* nodes (a pair's own
    mean would hide an exact copy), so copies stand out and honest pairs do not."""
    live = [e for e in entries if e.ok and e.flat is not None]
    if not live:
        return
    flat = {e.id: e.flat for e in live if e.flat is not None}
    threshold = ctx.settings.copy_cosine
    small = len(live) < MIN_FOR_RESIDUALS  # too few nodes to estimate the shared component:
    if small:  # raw cosine, near-identical vectors only (honest pairs can be close there)
        threshold = max(threshold, SMALL_ROUND_COPY_COSINE)
    auditing = ctx.settings.audit_fraction > 0
    for i, e in enumerate(live):  # this round: a pair is suspicious; the audit tells them apart
        for other in live[:i]:
            others = [flat[x.id] for x in live if x is not e and x is not other]
            d = None if small else _direction(others)
            c = cosine(residual(flat[e.id], d), residual(flat[other.id], d))
            if c < threshold:
                continue
            e.suspicious.append(f"residual cosine {c:.3f} with {other.att.node}")
            other.suspicious.append(f"residual cosine {c:.3f} with {e.att.node}")
            if not auditing:
                e.fail(
                    "copy",
                    f"pseudo-gradient copies node {other.att.node}'s of this round "
                    f"(residual cosine {c:.4f}), which arrived first",
                )
    earlier: list[tuple[str, torch.Tensor]] = []
    by_round: dict[int, list[torch.Tensor]] = {}
    nodes = {e.att.node for e in live}
    for r, node, pg in _history(session, rnd, ctx.settings.copy_history_rounds, nodes):
        t = _load(ctx, pg)
        if t is None:
            continue
        old = canonical_flat(t)
        earlier.append((f"node {node}'s of round {r}", old))
        by_round.setdefault(r, []).append(old)
    prev = by_round.get(rnd.round - 1)
    if prev:
        mean = torch.stack(prev).mean(0)
        earlier.append((f"the mean of round {rnd.round - 1}", mean))
        # the mean of a *subset* of last round's updates (a cheater leaves its own out) keeps
        # little residual in common with the full mean, but its raw direction is the same:
        # measured on the red team's real nodes, honest updates reach raw cosine 0.75 with the
        # previous mean, that copy 0.99. Suspicious only: the replay decides.
        for e in live:
            c = cosine(flat[e.id], mean) if flat[e.id].numel() == mean.numel() else 0.0
            if c >= threshold:
                e.suspicious.append(f"raw cosine {c:.3f} with the mean of round {rnd.round - 1}")
    for e in live:
        if not e.ok:
            continue
        d = None if small else _direction([flat[x.id] for x in live if x is not e])
        mine = residual(flat[e.id], d)
        for label, old in earlier:
            if old.numel() != mine.numel():
                continue
            c = cosine(mine, residual(old, d))
            if c >= threshold:
                e.fail("copy", f"pseudo-gradient repeats {label} (residual cosine {c:.4f})")
                break


def _usefulness(entries: list[Entry], ctx: Context) -> None:
    for e in entries:
        if not e.ok or e.tensors is None:
            continue
        if ctx.usefulness is None:
            e.quality, e.reason = 1.0, "usefulness not measured (no scorer configured)"
            continue
        try:
            measured = ctx.usefulness(e.att, e.tensors)
        except ShardMismatch as exc:
            e.fail("shard_mismatch", str(exc))
            continue
        except CheckpointError as exc:  # the ledger's preset is not this run's model
            log.error("usefulness scorer does not fit the run's model: %s", exc)
            e.quality = 1.0
            e.reason = (
                "usefulness not measured: the ledger's model preset does not fit this run "
                "(set COLOCO_LEDGER_USEFULNESS_MODEL)"
            )
            continue
        except Exception as exc:  # the scorer is trainer code: record why, score zero
            log.warning("usefulness scorer failed for %s: %s", e.att.node, exc)
            e.fail("usefulness", f"usefulness could not be measured: {exc}")
            continue
        if measured is None:
            e.quality = 1.0
            e.reason = "usefulness not measured (base checkpoint blob missing)"
            continue
        score = measured.score if measured.score == measured.score else 0.0
        e.quality, e.reason = min(max(score, 0.0), 1.0), measured.reason
        if not measured.on_shard and _can_audit(ctx):  # trained elsewhere? the replay tells
            e.suspicious.append("its own shard improved less than random rows")
        if e.quality > 0:
            continue
        if _can_audit(ctx):  # honest steps can raise the loss on a noisy round: the replay
            e.unhelpful = measured.reason  # tells honest work (paid at the floor) from junk
            e.suspicious.append("did not lower its own-shard loss")
        else:
            e.fail("usefulness", measured.reason + ": the update does not help the model")


def _inner_steps(entries: list[Entry], ctx: Context, base: Tensors | None) -> float:
    """The fresh AdamW's fingerprints (``ledger.judge.steps``): the largest coordinate against
    the round's median (the step-count relation) and, on the coordinates that moved the most,
    the sign of the declared shard's first batch. Suspicious only: the replay decides. Returns
    the probe's CPU seconds."""
    live = [e for e in entries if e.ok and e.tensors is not None]
    if not live or base is None or not _can_audit(ctx) or ctx.settings.usefulness_model is None:
        return 0.0
    from ledger.judge.usefulness import corpus_of, matching_shard
    from reference.data import ShardSpec

    lr = ctx.config.inner_lr_e6 / 1e6
    # per declared step (a time-boxed node ran fewer): about lr for every honest node
    tops = {
        e.id: linf_ratio(steps_linf(e.tensors), lr, e.att.inner_steps)
        for e in live
        if e.tensors is not None
    }
    if len(tops) >= 3:
        ref = median(list(tops.values()))
        lo, hi = LINF_BAND[0] * ref, LINF_BAND[1] * ref
        for e in live:
            top = tops[e.id]
            if ref > 0 and not lo <= top <= hi:
                e.suspicious.append(
                    f"largest coordinate {top:.3f} x lr x innerSteps is {top / ref:.2f}x the "
                    "round's median"
                )
    try:
        probe = FirstStepProbe(base, ctx.settings.usefulness_model)
    except CheckpointError as exc:  # the ledger's preset is not this run's model
        log.error("first-step probe does not fit the run's model: %s", exc)
        return 0.0
    corpus = corpus_of(ctx.settings.usefulness_corpus)
    mixture = tuple(ctx.config.data_mixture)
    seq_len = probe.config.seq_len
    for e in live:
        a = e.att
        size = matching_shard(a, mixture, ctx.config.inner_steps)
        batch = a.tokens // (a.inner_steps * seq_len) if a.inner_steps else 0
        if size is None or batch <= 0 or e.tensors is None:
            continue
        spec = ShardSpec.for_node(bytes.fromhex(a.run_id[2:]), a.round, a.node, size, mixture)
        rows = corpus.shard_rows(spec, seq_len)[:batch]
        got = probe.agreement(e.tensors, rows, lr, a.inner_steps)
        e.reason += (
            f"; first batch: {got.agreeing} of {got.saturated} most-moved "
            f"(>= {got.cut:.2f} lr x H) agree"
        )
        if got.suspicious:
            e.suspicious.append(
                f"{got.saturated - got.agreeing} of the {got.saturated} coordinates that moved "
                f"most disagree with the first batch of its shard (agreement {got.share:.4f})"
            )
    return probe.cpu_seconds


def _can_audit(ctx: Context) -> bool:
    return ctx.settings.audit_fraction > 0 and ctx.settings.usefulness_model is not None


def _settle_unhelpful(entries: list[Entry]) -> None:
    """An update that did not lower its own-shard loss: paid at the usefulness floor when the
    replay showed it is the declared work on the declared shard, rejected otherwise."""
    from ledger.judge.usefulness import USEFUL_FLOOR

    for e in entries:
        if e.unhelpful is None or not e.ok:
            continue
        if e.replayed:
            e.quality = USEFUL_FLOOR
            e.reason += (
                f"; quality {USEFUL_FLOOR} (the usefulness floor): the update did not lower "
                "its own-shard loss this round, but the replay shows it is the declared work"
            )
        else:
            e.fail("usefulness", e.unhelpful + ": the update does not help the model")


# --- outer step, audit, rewards -----------------------------------------------------------------


def _weight(e: Entry, ctx: Context) -> int:
    """The entry's all-reduce weight: its tokens, at most what its steps can have consumed."""
    tps = ctx.settings.tokens_per_step
    return min(e.att.tokens, e.att.inner_steps * tps) if tps else e.att.tokens


def _step(ctx: Context, base: Tensors, momentum: Tensors | None, group: list[Entry]) -> OuterResult:
    return outer_step(
        base,
        momentum,
        [e.packet if e.packet is not None else e.tensors for e in group],
        weights=[_weight(e, ctx) for e in group],
        lr=ctx.config.outer_lr_e6 / 1e6,
        mu=ctx.config.outer_momentum_e6 / 1e6,
        wire_format=ctx.config.wire_format,
    )


def _result_check(
    entries: list[Entry], ctx: Context, base: Tensors, momentum: Tensors | None
) -> tuple[list[str], OuterResult] | None:
    """The step over every member's well-formed pseudo-gradient (what the all-reduce averaged);
    each attested resultCheckpoint must equal it (when at least one does: else none is judged)."""
    group = _declared_group(entries)
    members = sorted(
        (e for e in entries if e.tensors is not None and e.att.node in group),
        key=lambda e: e.att.node,
    )
    if not members:
        return None
    result = _step(ctx, base, momentum, members)
    if not any(e.att.result_checkpoint == result.checkpoint for e in entries):
        for e in entries:
            e.reason += f"; resultCheckpoint not confirmed (ledger computed {result.checkpoint})"
        return [e.att.node for e in members], result
    for e in entries:
        if e.att.result_checkpoint != result.checkpoint:
            e.fail(
                "result_mismatch",
                f"resultCheckpoint {e.att.result_checkpoint} is not the "
                f"ledger's outer step {result.checkpoint} over the "
                f"{len(members)} members' pseudo-gradients",
            )
    return [e.att.node for e in members], result


def _declared_group(entries: list[Entry]) -> set[str]:
    """The all-reduce group as most attesting nodes declare it (``round_members``; none
    declared counts as everyone): a node declaring itself alone does not change it."""
    nodes = {e.att.node for e in entries}
    votes: dict[str, int] = {}
    for e in entries:
        declared = set(json.loads(e.att.members)) if e.att.members else nodes
        for m in declared & nodes:
            votes[m] = votes.get(m, 0) + 1
    return {m for m, n in votes.items() if 2 * n > len(entries)}


def sampled(digest: str, fraction: float) -> bool:
    """The audit draw of an attestation: keccak of its digest, below ``fraction`` of 2**256."""
    if fraction <= 0:
        return False
    draw = int.from_bytes(keccak256(bytes.fromhex(digest[2:]) + b"coloco-audit"), "big")
    return draw < int(fraction * (1 << 256))


def _sampled(e: Entry, fraction: float) -> bool:
    return sampled(e.att.digest, fraction)


def decode_pseudo_gradient(raw: Tensors, model: Tensors | None) -> tuple[Tensors, Any, str | None]:
    """Public form of :func:`_decode` (``coloco audit`` decodes blobs the same way)."""
    return _decode(raw, model)


def _track_records(session: Session, rnd: RoundState, nodes: list[str]) -> dict[str, int]:
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


def _audit(
    session: Session, entries: list[Entry], ctx: Context, rnd: RoundState, base: Tensors
) -> float:
    if ctx.settings.audit_fraction <= 0 or ctx.settings.usefulness_model is None:
        return 0.0
    from ledger.judge.usefulness import corpus_of, matching_shard

    cpu = 0.0
    track = _track_records(session, rnd, [e.att.node for e in entries])
    for e in entries:  # nodes joining a running run (round 1's founders: the sample only)
        new = track.get(e.att.node, 0) < ctx.settings.audit_probation_rounds
        if e.ok and new and rnd.round > 1:
            e.suspicious.append("new to the run (probation)")
    cleared: set[str] = set()  # nodes whose copy partner failed: the pair is explained
    for e in sorted(entries, key=lambda x: (track.get(x.att.node, 0), x.id)):
        if not e.ok or e.tensors is None:
            continue
        reasons = [w for w in e.suspicious if not (e.att.node in cleared and "cosine" in w)]
        if not (reasons or _sampled(e, ctx.settings.audit_fraction)):
            continue
        inputs = ReplayInputs(
            run_id=bytes.fromhex(rnd.run_id[2:]),
            round=rnd.round,
            node=e.att.node,
            tokens=e.att.tokens,
            inner_steps=e.att.inner_steps,
            inner_lr=ctx.config.inner_lr_e6 / 1e6,
            mixture=tuple(ctx.config.data_mixture),
            preset=ctx.settings.usefulness_model,
            shard_tokens=matching_shard(
                e.att, tuple(ctx.config.data_mixture), ctx.config.inner_steps
            )
            or 0,
        )
        try:
            verdict = audit(
                base,
                e.tensors,
                inputs,
                corpus_of(ctx.settings.usefulness_corpus),
                tolerance=ctx.settings.audit_tolerance,
                packet=e.packet,
            )
        except CheckpointError as exc:  # the ledger's preset is not this run's model
            log.error("replay audit does not fit the run's model: %s", exc)
            e.reason += "; not audited: the ledger's model preset does not fit this run"
            continue
        cpu += verdict.cpu_seconds
        why = "sampled" if not reasons else "suspicious: " + "; ".join(reasons)
        if verdict.passed:
            e.replayed = True
            e.reason += f"; audited ({why}): {verdict.reason}"
            continue
        evidence = {
            "attestation": {k: getattr(e.att, k) for k in _ATT_FIELDS},
            "digest": e.att.digest,
            "signature": e.att.signature,
            "replay_inputs": inputs.to_json(),
            "base_checkpoint": ctx.base,
            "submitted": e.att.pseudo_gradient,
            "replayed": verdict.replayed_hash,
            "relative_error": verdict.rel_error,
            "tolerance": ctx.settings.audit_tolerance,
            "selected": why,
        }
        text = json.dumps(evidence, sort_keys=True, default=str)
        e.fraud = {"evidence": text, "evidence_hash": "0x" + keccak256(text.encode()).hex()}
        cleared.update(w.rsplit(" ", 1)[-1] for w in e.suspicious if "cosine" in w)
        e.fail(
            "audit_failed",
            f"{verdict.reason}; fraud record {e.fraud['evidence_hash']} (selected: {why})",
        )
    return cpu


_ATT_FIELDS = (
    "run_id",
    "round",
    "node",
    "config_version",
    "base_checkpoint",
    "pseudo_gradient",
    "data_shard",
    "inner_steps",
    "tokens",
    "result_checkpoint",
)


def _split(entries: list[Entry], ctx: Context) -> None:
    """Rewards in proportion to verified tokens x quality; what a fraud would have earned is
    recorded as withheld (it never enters the rewards tree)."""
    honest = {e.id: weight(e.tokens, e.quality) if e.ok else 0 for e in entries}
    with_fraud = dict(honest)
    for e in entries:
        if e.fraud is not None:
            with_fraud[e.id] = weight(e.att.tokens, e.quality)
    rewards = split_rewards(ctx.config.reward_per_round, honest)
    would = split_rewards(ctx.config.reward_per_round, with_fraud)
    for e in entries:
        e.reward = rewards.get(e.id, 0)
        if e.fraud is not None:
            e.fraud["withheld"] = str(would.get(e.id, 0))


def _legacy(entries: list[Entry], ctx: Context) -> Judgement:
    """No base checkpoint blob: the step cannot be recomputed; the nonzero majority is kept and
    the note says so (upload the genesis blob to avoid this path)."""
    ok = [e for e in entries if e.ok]
    majority = majority_checkpoint([e.att.result_checkpoint for e in ok])
    for e in ok:
        if e.att.result_checkpoint != majority:
            e.fail(
                "result_mismatch",
                f"result checkpoint {e.att.result_checkpoint} disagrees "
                f"with the majority {majority}",
            )
    _split(entries, ctx)
    note = "not recomputed: base checkpoint blob missing (majority of nonzero results)"
    return Judgement(entries, majority, note)


def record_frauds(session: Session, rnd: RoundState, entries: list[Entry]) -> None:
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
                    evidence_hash=e.fraud["evidence_hash"],
                    evidence=e.fraud["evidence"],
                    withheld=e.fraud.get("withheld", "0"),
                )
            )


__all__ = ["Context", "Entry", "Judgement", "datetime", "judge_round", "record_frauds"]
