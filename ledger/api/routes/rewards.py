"""GET /v1/rewards/{address}: cumulative amount, proof vs the latest committed root, receipts.

Each answer says where the proof's root stands (pending in its dispute window, finalized and
claimable, or revoked) and from when it pays; each receipt says the same of its round's root."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from sqlalchemy import ColumnElement, Connection, Select, bindparam, or_, union
from sqlalchemy import select as sa_select
from sqlmodel import Session

from ledger.api.deps import EthTreesDep, RewardsTreesDep, SessionDep, SnapshotDep
from ledger.api.errors import errors, json_response
from ledger.api.raw import Keyed, RawSelect
from ledger.chain.indexer import ChainSnapshot
from ledger.core.models import Attestation, ChainCommit, RoundState, Settlement
from ledger.core.schemas import RewardsOut
from ledger.reads.receipts import GATE_COLUMNS, Gate, other_kinds
from ledger.reads.trees import EthTrees, RewardsTrees
from protocol.eip712 import to_checksum_address
from protocol.types import Address

router = APIRouter(prefix="/rewards", tags=["rewards"])

LIMIT, LIMIT_MAX = 100, 1000  # newest entries returned: the default and the most
_ATT = Attestation.__table__  # type: ignore[attr-defined]
_ROUND = RoundState.__table__  # type: ignore[attr-defined]
_COMMIT = ChainCommit.__table__  # type: ignore[attr-defined]
_SETTLEMENT = Settlement.__table__  # type: ignore[attr-defined]
_RECEIPT_COLUMNS = tuple(
    _ATT.c[name]
    for name in (
        "id", "run_id", "round", "node", "payout", "tokens", "verified_tokens", "quality",
        "reward", "verified", "reason",
    )
)  # fmt: skip
# built once (a payout's rewards are what every node polls), two round trips: the latest
# committed settlement with what decides the other kinds (receipts.GATE_COLUMNS), then the
# account's newest receipts with their rounds' states and roots
_HEAD = RawSelect(
    sa_select(
        *(
            sa_select(column)
            .where(or_(_SETTLEMENT.c.status == "mined", _SETTLEMENT.c.status == "final"))
            .order_by(_SETTLEMENT.c.id.desc())
            .limit(1)
            .scalar_subquery()
            for column in (_SETTLEMENT.c.id, _SETTLEMENT.c.rewards_root)
        ),
        *GATE_COLUMNS,
    )
)
_TREE = RawSelect(
    sa_select(_SETTLEMENT.c.tree, _SETTLEMENT.c.leases).where(_SETTLEMENT.c.id == bindparam("id"))
)


def settlement_tree(conn: Connection, settlement_id: int) -> tuple[str, str | None]:
    """A settlement's stored amounts and lease leaves (JSON), as RewardsTrees reads them."""
    tree, leases = _TREE.one(conn, {"id": settlement_id})
    return str(tree), None if leases is None else str(leases)


def _newest(where: ColumnElement[bool]) -> Any:
    """The newest ``limit`` rows under ``where``, read in id order from ix_*_id (not every row
    of the account sorted: an ``OR`` of the two conditions cannot use those indexes)."""
    return (
        sa_select(*_RECEIPT_COLUMNS)
        .where(where)
        .order_by(_ATT.c.id.desc())
        .limit(bindparam("limit"))
        .subquery()
    )


def _receipts(nodes: ColumnElement[bool]) -> Select[Any]:
    """The account's newest receipts (paid to it, or worked by its nodes: a row can be both,
    the union keeps it once) with their rounds' states and roots, oldest first."""
    both = union(
        sa_select(_newest(_ATT.c.payout == bindparam("account"))),
        sa_select(_newest(nodes)),
    ).subquery()
    newest = sa_select(both).order_by(both.c.id.desc()).limit(bindparam("limit")).subquery()

    def of_round(column: Any) -> Any:  # one index lookup per receipt (uq_round, uq_chain_commit)
        table = column.table
        return (
            sa_select(column)
            .where(table.c.run_id == newest.c.run_id, table.c.round == newest.c.round)
            .scalar_subquery()
        )

    return sa_select(newest, of_round(_ROUND.c.state), of_round(_COMMIT.c.rewards_root)).order_by(
        newest.c.id
    )


_RECEIPTS = Keyed(_ATT.c.node, _receipts)


@router.get("/{address}", response_model=RewardsOut, responses=errors(422, 503))
def get_rewards(
    address: Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")],
    *,
    session: SessionDep,
    snapshot: SnapshotDep,
    settled: RewardsTreesDep,
    eth: EthTreesDep,
    limit: Annotated[
        int, Query(ge=1, le=LIMIT_MAX, description="newest receipts returned")
    ] = LIMIT,
) -> Response:
    """What ``RewardDistributor.claim(account, cumulative_amount, proof)`` needs, and why."""
    conn = session.connection()
    return json_response(
        rewards_json(conn, address, limit, snap=snapshot, settled=settled, eth=eth)
    )


def rewards_json(
    conn: Connection,
    address: str,
    limit: int,
    *,
    snap: ChainSnapshot,
    settled: RewardsTrees,
    eth: EthTrees,
) -> dict[str, Any]:
    """``RewardsOut`` as plain data (no model per row): statements built once. ``settled``:
    the committed settlements' trees; ``eth``: the funded runs' ETH trees (other kinds)."""
    account = to_checksum_address(address)
    latest_id, root, *gate = _HEAD.one(conn, {"account": account})
    amount, proof = 0, []
    if latest_id is not None:
        amounts, tree = settled.of(latest_id, lambda: settlement_tree(conn, latest_id))
        if tree is not None and account in amounts:
            amount = amounts[account]
            proof = ["0x" + p.hex() for p in tree.proof(Address(account))]
    root_state, claimable_at = snap.root_state(root)
    nodes = [n.address for n in snap.nodes.values() if n.payout == account]
    atts = _RECEIPTS.rows(conn, nodes or [account], {"account": account, "limit": limit})
    receipts = []
    for a in atts:  # plain data, as Receipt and RewardsOut write it (no model per row)
        (_, run_id, rnd, node, payout, tokens, verified_tokens, quality, reward, verified,
         reason, round_state, round_root) = a  # fmt: skip
        if payout not in (None, account):
            continue
        root_of = (None, None) if round_root is None else snap.root_state(round_root)
        receipts.append(
            {
                "run_id": run_id,
                "round": rnd,
                "node": node,
                "claimed_tokens": tokens,
                "verified_tokens": verified_tokens,
                "quality": quality,
                "reward": reward or "0",
                "verified": verified,
                "reason": reason or "round not scored yet",
                "round_state": round_state or "open",
                "root_state": root_of[0],
                "claimable_at": root_of[1],
            }
        )
    with Session(bind=conn) as orm:  # the other kinds' lookups (most accounts: none) are ORM
        kinds = other_kinds(eth, orm, account, Gate.of(gate))
    return {
        "account": account,
        "cumulative_amount": str(amount),
        "proof": proof,
        "root": root,
        "root_committed": latest_id is not None,
        "root_state": root_state,
        "claimable_at": claimable_at,
        "receipts": receipts,
        "other_kinds": kinds,
    }
