"""Receipts of the code and capital kinds, and ETH for compute, from the indexed tables only.

``GET /v1/rewards/{address}`` serves the compute receipts from the attestations; this adds the
other two kinds from the ``funding_event`` rows the indexer keeps (ledger/chain/funding_index.py):
``CodeRegistry``'s submissions and decisions, ``RunFunding``'s deposits, vesting and claims, and
per funded run the ETH the address earned for compute under the latest indexed ETH root. No RPC
in a request: what the contracts compute in views (a backer's entitlement and vested share) is
computed here the same way from the events, as of the indexer's cursor block (``as_of``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from ledger.chain.indexer import CURSOR_KEY, CURSOR_TIME_KEY
from ledger.core.models import Attestation, FundingEvent, KeyValue
from ledger.reads.trees import EthTrees

CODE_STATUS = ("none", "pending", "approved", "rejected", "claimed")

_EVENT = FundingEvent.__table__  # type: ignore[attr-defined]
_ATT = Attestation.__table__  # type: ignore[attr-defined]
_KV = KeyValue.__table__  # type: ignore[attr-defined]


def _has_event(*where: Any) -> Any:
    return sa_select(_EVENT.c.id).where(*where).limit(1).exists()


def _cursor(key: str) -> Any:
    return sa_select(_KV.c.value).where(_KV.c.key == key).scalar_subquery()


def _moment(block: Any, when: Any) -> tuple[int | None, int | None]:
    """The cursor's (block, timestamp) as stored (text) to integers."""
    return (int(block) if block is not None else None), (int(when) if when is not None else None)


# built once (a rewards read, what nodes poll, runs them every time): the indexer's cursor, as
# columns of one row; and what a rewards read needs to know before the other kinds, beside it
# (one round trip): whether the account has any code or capital event and any run an ETH root
# (most accounts asking are compute nodes: none of them)
_CURSOR_COLUMNS = (_cursor(CURSOR_KEY), _cursor(CURSOR_TIME_KEY))
_AS_OF = sa_select(*_CURSOR_COLUMNS)
GATE_COLUMNS = (
    *_CURSOR_COLUMNS,
    _has_event(_EVENT.c.account == bindparam("account"), _EVENT.c.name == "Submitted"),
    _has_event(_EVENT.c.account == bindparam("account"), _EVENT.c.name == "Deposited"),
    _has_event(_EVENT.c.name == "EthRootCommitted"),
)
_GATE = sa_select(*GATE_COLUMNS)


@dataclass(frozen=True)
class Gate:
    """A row of :data:`GATE_COLUMNS`."""

    block: int | None
    time: int | None
    code: bool
    capital: bool
    eth: bool

    @classmethod
    def of(cls, row: Sequence[Any]) -> Gate:
        block, when, code, capital, eth = row
        return cls(*_moment(block, when), bool(code), bool(capital), bool(eth))


_ETH_RUNS = sa_select(_EVENT.c.run_id).where(_EVENT.c.name == "EthRootCommitted").distinct()
_WORKED_IN = (
    sa_select(_ATT.c.run_id)
    .where(
        _ATT.c.payout == bindparam("account"), _ATT.c.run_id.in_(bindparam("runs", expanding=True))
    )
    .distinct()
)


def _args(row: FundingEvent) -> dict[str, Any]:
    args: dict[str, Any] = json.loads(row.args)
    return args


def _newest_first() -> tuple[Any, Any]:
    return col(FundingEvent.block_number).desc(), col(FundingEvent.log_index).desc()


def _latest(session: Session, run_id: str | None, *names: str) -> FundingEvent | None:
    query = select(FundingEvent).where(col(FundingEvent.name).in_(names))
    if run_id is not None:
        query = query.where(FundingEvent.run_id == run_id)
    return session.exec(query.order_by(*_newest_first())).first()


@dataclass(frozen=True)
class RunView:
    """``RunFunding.runOf(runId)`` as of the indexed block, folded from the run's events."""

    funding_end: int
    cancelled_at: int
    eth_per_round: int
    total_deposited: int
    weighted_time: int
    eth_committed: int
    eth_paid: int
    capital_pool: int
    last_round: int | None
    refund_pool: int

    @property
    def end(self) -> int:
        """When deposits stop counting: the funding end, or the cancellation if earlier."""
        if self.cancelled_at and self.cancelled_at < self.funding_end:
            return self.cancelled_at
        return self.funding_end

    def as_json(self) -> dict[str, Any]:
        return {
            "funding_end": self.funding_end,
            "cancelled_at": self.cancelled_at,
            "total_deposited_wei": str(self.total_deposited),
            "eth_committed_wei": str(self.eth_committed),
            "eth_paid_wei": str(self.eth_paid),
            "eth_per_round_wei": str(self.eth_per_round),
            "capital_pool": str(self.capital_pool),
            "last_round": self.last_round,
            "refund_pool_wei": str(self.refund_pool),
        }


def run_view(session: Session, run_id: str) -> RunView | None:
    """The run's funding account (None: never opened), from a handful of indexed lookups."""
    opened = _latest(session, run_id, "RunOpened")
    if opened is None:
        return None
    per_round = _latest(session, run_id, "RunOpened", "EthPerRoundSet")
    cancelled = _latest(session, run_id, "RunCancelled")
    deposit = _latest(session, run_id, "Deposited")
    root = _latest(session, run_id, "EthRootCommitted")
    pool = _latest(session, run_id, "EthRootCommitted", "CapitalAccrued")
    paid = _latest(session, run_id, "EthClaimed")
    root_args = _args(root) if root is not None else {}
    return RunView(
        funding_end=int(_args(opened)["fundingEnd"]),
        cancelled_at=cancelled.block_time if cancelled is not None else 0,
        eth_per_round=int(_args(per_round)["ethPerRound"]) if per_round is not None else 0,
        total_deposited=int(_args(deposit)["totalDeposited"]) if deposit is not None else 0,
        weighted_time=int(deposit.running or 0) if deposit is not None else 0,
        eth_committed=int(root_args.get("totalWei", 0)),
        eth_paid=int(paid.running or 0) if paid is not None else 0,
        capital_pool=int(_args(pool).get("capitalPool", 0)) if pool is not None else 0,
        last_round=int(root_args["round"]) if root is not None else None,
        refund_pool=int(cancelled.amount or 0) if cancelled is not None else 0,
    )


def as_of(session: Session) -> tuple[int | None, int | None]:
    """(block, timestamp) the indexed tables describe: the indexer's cursor (one query)."""
    return _moment(*session.execute(_AS_OF).one())


def latest_root(session: Session, run_id: str) -> dict[str, Any] | None:
    """The run's latest indexed ETH root: root, round, total, when it pays, whether revoked."""
    row = _latest(session, run_id, "EthRootCommitted")
    if row is None:
        return None
    args = _args(row)
    revoked = session.exec(
        select(FundingEvent.id).where(
            FundingEvent.run_id == run_id,
            FundingEvent.name == "EthRootRevoked",
            FundingEvent.ref == row.ref,
        )
    ).first()
    return {
        "root": row.ref,
        "round": int(args["round"]),
        "total_wei": str(args["totalWei"]),
        "claimable_from": int(args["finalizesAt"]),
        "revoked": revoked is not None,
    }


def code_receipts(session: Session, account: str) -> list[dict[str, Any]]:
    """Every code contribution ``account`` submitted, with the decision on it."""
    submitted = session.exec(
        select(FundingEvent)
        .where(FundingEvent.name == "Submitted", FundingEvent.account == account)
        .order_by(col(FundingEvent.block_number), col(FundingEvent.log_index))
    ).all()
    if not submitted:
        return []
    ids = [row.ref for row in submitted]
    decisions: dict[str | None, list[FundingEvent]] = {}
    for row in session.exec(
        select(FundingEvent)
        .where(
            FundingEvent.contract == "CodeRegistry",
            col(FundingEvent.ref).in_(ids or [""]),
            col(FundingEvent.name).in_(("Approved", "Rejected", "CodeClaimed")),
        )
        .order_by(col(FundingEvent.block_number), col(FundingEvent.log_index))
    ):
        decisions.setdefault(row.ref, []).append(row)
    out = []
    for row in submitted:
        args = _args(row)
        status, amount, by_vote, reason = "pending", "0", None, None
        for d in decisions.get(row.ref, []):
            dargs = _args(d)
            if d.name == "Approved":
                status, amount, by_vote = "approved", str(dargs["amount"]), bool(dargs["byVote"])
            elif d.name == "Rejected":
                status, reason = "rejected", str(dargs["reason"])
            else:
                status = "claimed"
        out.append(
            {
                "id": int(row.ref or 0),
                "run_id": row.run_id,
                "repository_uri": args["repositoryUri"],
                "commit": args["commitHash"],
                "description_uri": args["descriptionUri"],
                "status": status,
                "amount": amount,
                "by_vote": by_vote,
                "reason": reason,
                "block": row.block_number,
            }
        )
    return out


def _vesting_period(session: Session) -> int:
    row = _latest(session, None, "VestingPeriodSet")
    return int(_args(row)["vestingPeriod"]) if row is not None else 0


def capital_receipts(session: Session, account: str) -> list[dict[str, Any]]:
    """Per run ``account`` backed: deposits, entitlement, vested share (as of the indexed block),
    what it claimed, and its refund if the run was cancelled."""
    deposits = session.exec(
        select(FundingEvent).where(
            FundingEvent.name == "Deposited", FundingEvent.account == account
        )
    ).all()
    runs: dict[str, tuple[int, int]] = {}
    for row in deposits:
        assert row.run_id is not None
        deposited, weighted = runs.get(row.run_id, (0, 0))
        amount = int(row.amount or 0)
        runs[row.run_id] = (deposited + amount, weighted + amount * row.block_time)
    if not runs:
        return []
    _, now = as_of(session)
    period = _vesting_period(session)
    out = []
    for run_id, (deposited, weighted) in sorted(runs.items()):
        run = run_view(session, run_id)
        if run is None:
            continue
        end = run.end
        weight = deposited * end - weighted
        total = run.total_deposited * end - run.weighted_time
        entitlement = run.capital_pool * weight // total if weight and total else 0
        if now is None or now < end:
            vested = 0
        elif period == 0 or now - end >= period:
            vested = entitlement
        else:
            vested = entitlement * (now - end) // period
        claimed = _latest_of(session, run_id, "CapitalClaimed", account)
        refunded = _latest_of(session, run_id, "Refunded", account)
        out.append(
            {
                "run_id": run_id,
                "deposited_wei": str(deposited),
                "entitlement": str(entitlement),
                "vested": str(vested),
                "claimed": str(_args(claimed)["claimed"]) if claimed is not None else "0",
                "vesting_starts": end,
                "vesting_period_s": period,
                "cancelled": run.cancelled_at != 0,
                "refunded_wei": (refunded.amount or "0") if refunded is not None else "0",
            }
        )
    return out


def _latest_of(session: Session, run_id: str, name: str, account: str) -> FundingEvent | None:
    return session.exec(
        select(FundingEvent)
        .where(
            FundingEvent.run_id == run_id,
            FundingEvent.name == name,
            FundingEvent.account == account,
        )
        .order_by(*_newest_first())
    ).first()


def eth_receipts(trees: EthTrees, session: Session, account: str) -> list[dict[str, Any]]:
    """Per funded run ``account`` worked in: its cumulative wei under the latest indexed ETH root
    (``trees``) and what it claimed so far."""
    funded = session.execute(_ETH_RUNS).scalars().all()
    if not funded:
        return []
    worked = session.execute(_WORKED_IN, {"account": account, "runs": funded}).scalars().all()
    out = []
    for run_id in worked:
        _, amounts, rnd = trees.tree(session, run_id)
        if account not in amounts:
            continue
        claimed = _latest_of(session, run_id, "EthClaimed", account)
        root = latest_root(session, run_id)
        out.append(
            {
                "run_id": run_id,
                "round": rnd,
                "cumulative_wei": str(amounts[account]),
                "claimed_wei": str(_args(claimed)["cumulativeWei"]) if claimed else "0",
                "root": root,
            }
        )
    return out


def other_kinds(
    trees: EthTrees, session: Session, account: str, gate: Gate | None = None
) -> dict[str, Any]:
    """{"code": [...], "capital": [...], "eth_for_compute": [...], "as_of": {...}} of
    ``account``, from the indexed tables only; ``gate`` (one row, read here if not given) says
    which kinds to look up at all."""
    if gate is None:
        gate = Gate.of(session.execute(_GATE, {"account": account}).one())
    return {
        "code": code_receipts(session, account) if gate.code else [],
        "capital": capital_receipts(session, account) if gate.capital else [],
        "eth_for_compute": eth_receipts(trees, session, account) if gate.eth else [],
        "as_of": {"block": gate.block, "time": gate.time},
    }
