"""Levels 1-3 for one round: membership, derived work, tensors, copies, usefulness, the ledger's own
outer step, and the replay audit of a sample plus every suspicious node. One verdict per
attestation, each with the check that decided it and its evidence (the receipt's reason).

Order (cheap before expensive), each step in its own module: membership, zero result checkpoint,
base checkpoint, work derived from the governed settings (:mod:`.claims`); a member's signed
packet commitment that contradicts its attestation (:mod:`.commits`); blob uploaded, tensors
match the model and are finite and non-zero (:mod:`.pseudo_gradients`); magnitude within
[floor, ceiling] x the round's median norm, not a copy (this round, the previous K rounds, the
previous round's mean, the node's own earlier updates) (:mod:`.comparisons`); usefulness on the
node's shard (with the audit on, an update that does not lower its own-shard loss is replayed:
honest work is paid at the usefulness floor, anything else fails the audit) and the first-step
probe (:mod:`.scores`); a leased node's attested rate against its offer (:mod:`.throughput`);
then the outer step over the members' pseudo-gradients (each result
checkpoint must equal it: :mod:`.result`), the replay audit (:mod:`.audits`), the reward split
(:mod:`.rewards`), and the committed step: over the members' pseudo-gradients that are safe to
apply (the model's shapes, finite, within the magnitude bounds): what the members' all-reduce
did, minus what would harm the model (nodes resync from ``GET /v1/runs/{run}/outer/{round}``).
Rewards go to verified work only; the round's fraud records are written by
:func:`~ledger.judge.fraud.record_frauds`.
"""

from __future__ import annotations

from sqlmodel import Session

from ledger.core.models import Attestation, RoundState
from ledger.judge.audits import replay_audits
from ledger.judge.claims import check_claims, check_equivocation
from ledger.judge.commits import check_commits
from ledger.judge.comparisons import (
    check_alignment,
    check_copies,
    check_index_overlap,
    check_magnitude,
)
from ledger.judge.entries import Context, Entry, Judgement
from ledger.judge.fraud import record_frauds
from ledger.judge.outer_step import load_momentum, store
from ledger.judge.pseudo_gradients import load_pseudo_gradients
from ledger.judge.result import check_results, declared_group, members_step
from ledger.judge.rewards import share_rewards
from ledger.judge.rules import cap_tokens, majority_checkpoint
from ledger.judge.scores import probe_inner_steps, score_usefulness, settle_unhelpful
from ledger.judge.throughput import check_leased, flops_per_token


def judge_round(
    session: Session, rnd: RoundState, atts: list[Attestation], ctx: Context
) -> Judgement:
    """Every verdict of the round, in order; the checkpoint to commit and a note on it."""
    entries = [Entry(a) for a in atts]
    base_tensors = ctx.blobs.tensors(ctx.base)
    ctx.model = base_tensors
    check_claims(entries, ctx)
    check_equivocation(entries, session, rnd)
    check_commits(entries, ctx.domain)
    load_pseudo_gradients(entries, ctx, base_tensors)
    check_magnitude(entries, ctx, session, rnd)
    check_copies(entries, ctx, session, rnd)
    check_index_overlap(entries, ctx)
    check_alignment(entries, ctx)
    score_usefulness(entries, ctx)
    probe_cpu = probe_inner_steps(entries, ctx, base_tensors)
    _cap_tokens(entries, ctx)
    check_leased(entries, rnd, ctx.leased, flops_per_token(base_tensors), ctx.start_of)
    if base_tensors is None:
        return _legacy(entries, ctx)
    momentum = load_momentum(session, ctx.blobs, rnd.run_id, ctx.last_round)
    allreduced = check_results(entries, ctx, base_tensors, momentum)
    cpu = replay_audits(session, entries, ctx, rnd, base_tensors)
    settle_unhelpful(entries)
    share_rewards(entries, ctx)
    if not any(e.ok and e.quality > 0 and e.tokens > 0 for e in entries):
        return Judgement(
            entries, None, "no pseudo-gradient was accepted: nothing to commit", cpu, probe_cpu
        )
    group = declared_group(entries)
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
        result = members_step(ctx, base_tensors, momentum, safe)
    store(session, ctx.blobs, rnd.run_id, rnd.round, result)
    note = (
        f"checkpoint computed by the ledger: outer step over {len(safe)} members' "
        f"pseudo-gradients ({sum(e.ok for e in entries)} paid)"
    )
    return Judgement(entries, result.checkpoint, note, cpu, probe_cpu)


def _cap_tokens(entries: list[Entry], ctx: Context) -> None:
    """Credit at most the tokens the node's time allowed (``max_tokens_per_s``)."""
    for e in entries:
        if e.ok:
            seconds = (e.att.received_at - ctx.start_of(e.att)).total_seconds()
            e.tokens = cap_tokens(e.att.tokens, seconds, ctx.settings.max_tokens_per_s)
            if e.tokens < e.att.tokens:
                e.reason += (
                    f"; {e.att.tokens} tokens claimed in {seconds:.1f}s, credited {e.tokens} "
                    f"(max {ctx.settings.max_tokens_per_s:g} tokens/s)"
                )


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
    share_rewards(entries, ctx)
    note = "not recomputed: base checkpoint blob missing (majority of nonzero results)"
    return Judgement(entries, majority, note)


__all__ = ["Context", "Entry", "Judgement", "judge_round", "record_frauds"]
