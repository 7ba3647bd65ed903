"""The result checkpoint of a round: the ledger's own outer step over the members'
pseudo-gradients (:mod:`ledger.judge.outer_step`), token-weighted as the all-reduce weighed them.

:func:`check_results` steps over every member's well-formed update (what the all-reduce averaged)
and holds each attested resultCheckpoint to it; :func:`members_step` is the step itself, which
the entry point also takes over the members' updates that are safe to apply.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

from ledger.judge.entries import Context, Entry
from ledger.judge.outer_step import OuterResult, outer_step
from ledger.judge.tensors import Tensors

if TYPE_CHECKING:
    from reference.codec import Packet


def allreduce_weight(e: Entry, ctx: Context) -> int:
    """The entry's all-reduce weight: its tokens, at most what its steps can have consumed."""
    tps = ctx.settings.tokens_per_step
    return min(e.att.tokens, e.att.inner_steps * tps) if tps else e.att.tokens


def fed(e: Entry) -> Tensors | Packet:
    """What the node fed the all-reduce: its commitment's packet, else its named tensors."""
    if e.packet is not None:
        return e.packet
    assert e.tensors is not None, "a member's step takes the entries whose tensors loaded"
    return e.tensors


def members_step(
    ctx: Context, base: Tensors, momentum: Tensors | None, group: list[Entry]
) -> OuterResult:
    """The outer step from ``base`` over ``group``'s updates (in the given order: sorted
    addresses, the trainer's rank order), with the governed outer settings."""
    return outer_step(
        base,
        momentum,
        [fed(e) for e in group],
        weights=[allreduce_weight(e, ctx) for e in group],
        lr=ctx.config.outer_lr,
        mu=ctx.config.outer_momentum,
        wire_format=ctx.config.wire_format,
    )


def check_results(
    entries: list[Entry], ctx: Context, base: Tensors, momentum: Tensors | None
) -> tuple[list[str], OuterResult] | None:
    """The step over every member's well-formed pseudo-gradient (what the all-reduce averaged);
    each attested resultCheckpoint must equal it, when at least one matches and no strict
    majority of the group's attestations agrees on another: a minority that matches never
    condemns a majority that agrees on another result (security review F6: one member that lies
    to its peers in the all-reduce holds the only matching result). An entry whose group had a
    member equivocate on its packet (``excused``) is not held to it either."""
    group = declared_group(entries)
    members = sorted(
        (e for e in entries if e.tensors is not None and e.att.node in group),
        key=lambda e: e.att.node,
    )
    if not members:
        return None
    result = members_step(ctx, base, momentum, members)
    in_group = [e for e in entries if e.att.node in group]
    held = Counter(e.att.result_checkpoint for e in in_group)
    other = [(n, h) for h, n in held.items() if h != result.checkpoint and 2 * n > len(in_group)]
    if not held[result.checkpoint] or other:
        why = "no attestation matches it"
        if other:
            why = f"{other[0][0]} of the group's {len(in_group)} attestations hold {other[0][1]}"
        for e in entries:
            e.reason += (
                f"; resultCheckpoint not confirmed (ledger computed {result.checkpoint}; {why})"
            )
            if e.excused is not None:
                e.reason += f": {e.excused}"
        return [e.att.node for e in members], result
    for e in entries:
        if e.att.result_checkpoint == result.checkpoint:
            continue
        if e.excused is not None:
            e.reason += f"; resultCheckpoint not held to the ledger's step: {e.excused}"
            continue
        e.fail(
            "result_mismatch",
            f"resultCheckpoint {e.att.result_checkpoint} is not the "
            f"ledger's outer step {result.checkpoint} over the "
            f"{len(members)} members' pseudo-gradients",
        )
    return [e.att.node for e in members], result


def declared_group(entries: list[Entry]) -> set[str]:
    """The all-reduce group as most attesting nodes declare it (``round_members``; none
    declared counts as everyone): a node declaring itself alone does not change it."""
    nodes = {e.att.node for e in entries}
    votes: dict[str, int] = {}
    for e in entries:
        declared = set(json.loads(e.att.members)) if e.att.members else nodes
        for m in declared & nodes:
            votes[m] = votes.get(m, 0) + 1
    return {m for m, n in votes.items() if 2 * n > len(entries)}
