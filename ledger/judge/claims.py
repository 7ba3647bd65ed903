"""Level 1 on what the attestation claims, before any tensor is read: the node joined the round,
its result checkpoint is not zero, its base is the committed checkpoint, it trained under the
round's config version, its work is derived from the governed settings; and it signed no second,
different attestation for the round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from sqlmodel import Session, col, select

from ledger.core.models import Attestation, Rejection, RoundState
from ledger.judge.entries import Context, Entry
from reference.settings import TrainingSettings

ZERO = "0x" + "00" * 32


def round_config(
    atts: Sequence[Attestation],
    configs: Mapping[int, TrainingSettings],
    current: TrainingSettings,
    *,
    members: frozenset[str] | None = None,
    base: str | None = None,
) -> TrainingSettings:
    """The settings a round is judged under: those of the ``configVersion`` most of its
    attestations sign (ties: the newer), as the indexer read them when that version was the
    chain's; ``current`` for a round with no attestation; for a version the ledger never read (it
    started after the version was replaced, or two votes landed within one indexing step) the
    current settings under that version's number, as the ledger judged before it kept versions.

    A round's members each read the config at the block their signed round-open names and
    compare read-outs before training (trainer/round/agreement.py), so they sign one version
    whatever governance executes while they train. The ledger scores later: judging with the
    settings in force then held every member of a round in flight during a vote to settings
    it never trained with (a lowered ``innerSteps`` failed them all, ``work_mismatch``). One
    node cannot pick the version the others are judged by: an entry signing another version
    fails ``config_mismatch``. Only the attestations that can pass level 1's first checks
    count (a member's, when the round has members; on the committed ``base``): staked nodes
    that did not join the round cannot outvote its members onto an older version and fail them
    all; swaying it takes more joined, staked members than the honest ones, the majority bound
    of the result check (security review F6)."""
    votes = Counter(
        a.config_version
        for a in atts
        if (members is None or a.node in members) and (base is None or a.base_checkpoint == base)
    )
    if not votes:
        return current
    version = max(votes, key=lambda v: (votes[v], v))
    if version == current.version:
        return current
    return configs.get(version) or replace(current, version=version)


def check_claims(entries: list[Entry], ctx: Context) -> None:
    """Membership, zero result checkpoint, base checkpoint, work (the first that fails).

    The work bound comes before any tensor or row is read: the declared ``tokens`` size the
    shard the usefulness test, the first-step probe and the replay rebuild, so a declaration
    beyond innerSteps x batch x seq_len fails here (``work_mismatch``) and is never scored. It is
    not refused at intake: a member whose update went into the round's all-reduce stays in the
    ledger's outer step, or the committed checkpoint would differ from every member's."""
    tps = ctx.settings.tokens_per_step
    per_step = ctx.settings.max_tokens_per_step()
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
        elif a.config_version != ctx.config.version:
            e.fail(
                "config_mismatch",
                f"configVersion {a.config_version} is not the round's version "
                f"{ctx.config.version} (the one most of its attestations sign): train and "
                "attest under the config read at the round's open block",
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
        elif per_step is not None and a.tokens > a.inner_steps * per_step:
            e.fail(
                "work_mismatch",
                f"tokens {a.tokens} exceed innerSteps x batch x seqLen = {a.inner_steps} x "
                f"{per_step} = {a.inner_steps * per_step} (COLOCO_LEDGER_MAX_BATCH_ROWS x the "
                "model's seq_len): claim the work the governed settings allow",
            )


def check_equivocation(entries: list[Entry], session: Session, rnd: RoundState) -> None:
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
