"""GET /v1/nodes/{address}: registration, stake, rounds worked, rejections (audit trail), and the
rounds it joined and never attested (`missed_rounds`: what an operator lost in an outage)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from sqlalchemy import Connection, bindparam, func, text
from sqlalchemy import select as sa_select

from ledger.api.deps import SessionDep, SnapshotDep
from ledger.api.errors import errors, json_response
from ledger.api.raw import Keyed
from ledger.chain.indexer import ChainSnapshot
from ledger.core.models import Attestation, Join, Rejection
from ledger.core.schemas import NodeOut
from ledger.intake.membership import missed_joins
from protocol.eip712 import to_checksum_address

router = APIRouter(prefix="/nodes", tags=["nodes"])

LIMIT, LIMIT_MAX = 100, 1000  # newest entries returned: the default and the most
_ATT = Attestation.__table__  # type: ignore[attr-defined]
_REJ = Rejection.__table__  # type: ignore[attr-defined]
_JOIN = Join.__table__  # type: ignore[attr-defined]
_ROUND_NAMES = (
    "run_id", "round", "node", "id", "tokens", "verified", "verified_tokens", "quality",
    "reward", "reason",
)  # fmt: skip
_ROUND_COLUMNS = tuple(_ATT.c[name] for name in _ROUND_NAMES)
_REJECTION_NAMES = ("run_id", "round", "code", "message", "digest", "at")  # as NodeOut says
_REJECTION_COLUMNS = tuple(
    _REJ.c[name] for name in ("run_id", "round", "code", "message", "digest", "created_at")
)
# built once (a node is what an operator's node and dashboard poll): the node's latest rounds
# and refusals under any of its keys, and how many rounds it worked
_ROUNDS = Keyed(
    _ATT.c.node,
    lambda keys: (
        sa_select(*_ROUND_COLUMNS).where(keys).order_by(_ATT.c.id.desc()).limit(bindparam("limit"))
    ),
)
_REJECTIONS = Keyed(
    _REJ.c.node,
    lambda keys: (
        sa_select(*_REJECTION_COLUMNS)
        .where(keys)
        .order_by(_REJ.c.id.desc())
        .limit(bindparam("limit"))
    ),
)
# rounds the node joined that closed without its attestation, newest first: signed work the
# ledger never received (an outage, a crash) or a join it never trained (the no-show rule's rows)
_MISSED = Keyed(
    _JOIN.c.node,
    lambda keys: (
        missed_joins((_JOIN.c.run_id, _JOIN.c.round), keys)
        .order_by(_JOIN.c.id.desc())
        .limit(bindparam("limit"))
    ),
)
# the partial index's own predicate, as text: SQLAlchemy writes ``is_(True)`` as ``IS 1`` on
# SQLite, which SQLite does not match to ``IS TRUE``, and then counts through every row of the node
VERIFIED = text("attestation.verified IS TRUE")
_WORKED = Keyed(
    _ATT.c.node,
    lambda keys: sa_select(func.count()).select_from(_ATT).where(keys, VERIFIED),
)

AddressPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")]


@router.get("/{address}", response_model=NodeOut, responses=errors(422, 503))
def get_node(
    address: AddressPath,
    session: SessionDep,
    snapshot: SnapshotDep,
    limit: Annotated[int, Query(ge=1, le=LIMIT_MAX)] = LIMIT,
) -> Response:
    return json_response(node_json(snapshot, session.connection(), address, limit))


def node_json(snap: ChainSnapshot, conn: Connection, address: str, limit: int) -> dict[str, object]:
    """``NodeOut`` as plain data (no ORM objects, no validation): three statements built once."""
    addr = to_checksum_address(address)
    node = snap.nodes.get(addr)
    keys = snap.keys_of(addr)  # a rotated node's history stays whole under its node id
    atts = _ROUNDS.rows(conn, keys, {"limit": limit})
    rejections = _REJECTIONS.rows(conn, sorted({*keys, address}), {"limit": limit})
    ((worked,),) = _WORKED.rows(conn, keys, {})
    return {
        "address": addr,
        "node_id": snap.node_id_of(addr),
        "keys": keys,
        "registered": bool(node and node.registered),
        "operator": node.operator if node else None,
        "payout": node.payout if node else None,
        "staked": node.staked if node else "0",
        "unbonding": node.unbonding if node else "0",
        "active": snap.is_active(addr),
        "rounds_worked": int(worked),
        "rounds": [dict(zip(_ROUND_NAMES, a, strict=True)) for a in atts],
        "rejections": [dict(zip(_REJECTION_NAMES, r, strict=True)) for r in rejections],
        "missed_rounds": missed_rounds(conn, keys, limit),
    }


def missed_rounds(conn: Connection, keys: list[str], limit: int = LIMIT) -> list[dict[str, object]]:
    """Rounds joined under any of ``keys`` that closed without the node's attestation, newest
    first (the API's ``missed_rounds`` and the dashboard's node page)."""
    return [
        {"run_id": run, "round": int(r)} for run, r in _MISSED.rows(conn, keys, {"limit": limit})
    ]
