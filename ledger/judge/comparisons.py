"""Level 2 across the round's pseudo-gradients: an honest magnitude (within [floor, ceiling] x the
round's median norm), a shared direction, and no copy (of another node this round, of the
previous K rounds, of the previous round's mean, of the node's own earlier updates).

With the audit on, most of these mark a node suspicious and the replay decides
(:mod:`ledger.judge.audits`); a norm out of bounds and a repeat of an earlier round's update fail
here.
"""

from __future__ import annotations

import torch
from sqlmodel import Session, col, select

from ledger.core.models import Attestation, RoundState
from ledger.judge.entries import Context, Entry, can_audit
from ledger.judge.pseudo_gradients import load_earlier
from ledger.judge.tensors import canonical_flat, cosine, median, residual, unit

SUSPICIOUS_NORM = (0.75, 1.33)
MIN_FOR_RESIDUALS = 4  # nodes in a round needed to remove the shared component
SMALL_ROUND_COPY_COSINE = 0.999  # outside this band of the median norm: replay-audited
ALIGNMENT_FLOOR = 0.1  # raw cosine with the round's other updates below this: replay-audited


def history(
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


def check_magnitude(entries: list[Entry], ctx: Context, session: Session, rnd: RoundState) -> None:
    live = [e for e in entries if e.ok and e.flat is not None]
    norms = [float(e.flat.norm()) for e in live if e.flat is not None]
    if len(norms) < 3:  # too few to judge by: the previous rounds' accepted norms
        for _, _, pg in history(session, rnd, 1):
            t = load_earlier(ctx, pg)
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


def check_alignment(entries: list[Entry], ctx: Context) -> None:
    """Honest updates of a round share a direction (raw cosine 0.3-0.75 with the previous round's
    mean on the red team's real nodes); noise and zeros do not (0.00). An update nearly
    orthogonal to the mean of the round's other updates is suspicious: the replay decides."""
    live = [e for e in entries if e.ok and e.flat is not None]
    if len(live) < MIN_FOR_RESIDUALS or not can_audit(ctx):
        return
    for e in live:
        others = [x.flat for x in live if x is not e and x.flat is not None]
        assert e.flat is not None
        c = cosine(e.flat, torch.stack(others).mean(0))
        if c < ALIGNMENT_FLOOR:
            e.suspicious.append(f"raw cosine {c:.3f} with the mean of the round's other updates")


def check_index_overlap(entries: list[Entry], ctx: Context) -> None:
    """Sparse packets (``WireFormat.SPARSE``): two members whose packets keep nearly the same
    positions copied one another (or one copied the other's update). Honest nodes share far
    fewer (bench.sparse_overlap: the threshold ``copy_index_overlap`` lies between the honest
    maximum and the copiers' minimum). With the audit on both are suspicious and the replay
    decides; without it the later of the pair fails as a copy."""
    from reference.codec.sparse import index_overlap
    from reference.settings import WireFormat

    live = [e for e in entries if e.ok and e.packet is not None
            and e.packet.fmt is WireFormat.SPARSE]  # fmt: skip
    threshold = ctx.settings.copy_index_overlap
    auditing = ctx.settings.audit_fraction > 0
    sparse = {e.id: e.packet.sparse() for e in live if e.packet is not None}
    for i, e in enumerate(live):
        for other in live[:i]:
            a, b = sparse[e.id], sparse[other.id]
            if a.numel != b.numel:
                continue
            share = index_overlap(a, b)
            if share < threshold:
                continue
            e.suspicious.append(f"keeps {share:.0%} of the positions {other.att.node} keeps")
            other.suspicious.append(f"keeps {share:.0%} of the positions {e.att.node} keeps")
            if not auditing and e.ok:
                e.fail("copy", f"sparse packet keeps {share:.1%} of the positions of node "
                       f"{other.att.node}'s (>= {threshold:.0%}), which arrived first")  # fmt: skip


def _direction(flats: list[torch.Tensor]) -> torch.Tensor | None:
    return unit(torch.stack(flats).mean(0)) if flats else None


def check_copies(entries: list[Entry], ctx: Context, session: Session, rnd: RoundState) -> None:
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
    for r, node, pg in history(session, rnd, ctx.settings.copy_history_rounds, nodes):
        t = load_earlier(ctx, pg)
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
