"""Level 2 per node: its update scored on its own shard (usefulness, quality in [0, 1]), the fresh
inner optimizer's fingerprints in it (the first-step probe, :mod:`ledger.judge.steps`), and, once
the replay audit ran, an unhelpful update settled: paid at the usefulness floor when the replay
shows it is the declared work, rejected otherwise.
"""

from __future__ import annotations

import logging

from ledger.judge.entries import Context, Entry, can_audit
from ledger.judge.steps import LINF_BAND, FirstStepProbe, linf_ratio
from ledger.judge.steps import linf as steps_linf
from ledger.judge.tensors import ShardMismatch, Tensors, median
from protocol.errors import CheckpointError

log = logging.getLogger(__name__)


def score_usefulness(entries: list[Entry], ctx: Context) -> None:
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
        if not measured.on_shard and can_audit(ctx):  # trained elsewhere? the replay tells
            e.suspicious.append("its own shard improved less than random rows")
        if e.quality > 0:
            continue
        if can_audit(ctx):  # honest steps can raise the loss on a noisy round: the replay
            e.unhelpful = measured.reason  # tells honest work (paid at the floor) from junk
            e.suspicious.append("did not lower its own-shard loss")
        else:
            e.fail("usefulness", measured.reason + ": the update does not help the model")


def probe_inner_steps(entries: list[Entry], ctx: Context, base: Tensors | None) -> float:
    """The fresh AdamW's fingerprints (``ledger.judge.steps``): the largest coordinate against
    the round's median (the step-count relation) and, on the coordinates that moved the most,
    the sign of the declared shard's first batch. Suspicious only: the replay decides. Returns
    the probe's CPU seconds.

    Both run in either inner mode. With a carried AdamW the first batch's sign flags honest
    rounds too (3 honest nodes, 26 rounds of the red team's settings: up to 14.7 % of the
    most-moved coordinates disagreed, 28 of 78 node-rounds flagged), which costs audits (the
    ledger's audit CPU 0.122 of the nodes' training in bench.redteam --quick, 0.012 fresh) and
    penalises nobody (the replay decides); without it a node that trains on other data is
    caught only when drawn (tests/redteam/test_redteam.py's other_data escaped, earnings 1.0)."""
    live = [e for e in entries if e.ok and e.tensors is not None]
    if not live or base is None or not can_audit(ctx) or ctx.settings.usefulness_model is None:
        return 0.0
    from ledger.judge.usefulness import corpus_of, matching_shard
    from reference.data import ShardSpec

    lr = ctx.config.inner_lr
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
    mixture = tuple(ctx.config.data_mixture_bps)
    seq_len = probe.config.seq_len
    for e in live:
        a = e.att
        size = matching_shard(a, mixture, ctx.config.inner_steps)
        batch = a.tokens // (a.inner_steps * seq_len) if a.inner_steps else 0
        if size is None or batch <= 0 or e.tensors is None:
            continue
        spec = ShardSpec.for_node(bytes.fromhex(a.run_id[2:]), a.round, a.node, size, mixture)
        rows = corpus.shard_rows(spec, seq_len, limit=batch)  # the first batch, nothing more
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


def settle_unhelpful(entries: list[Entry]) -> None:
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
