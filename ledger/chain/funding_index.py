"""RunFunding, CodeRegistry and ComputeLeases events into ``funding_event`` rows, for the indexer.

The indexer (ledger/chain/indexer.py) hands each chunk's events of these two contracts here, inside
the same database transaction as its cursor, so the rows follow its confirmation depth, its restart
resume and its reorg rewind (:func:`rewind` deletes the rows above the rewind block; the chunks
indexed again insert them anew). Requests read these rows only (ledger/reads/receipts.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from sqlmodel import Session, col, select

from ledger.chain.client import FUNDING_CONTRACTS, ChainEvent
from ledger.core.models import FundingEvent

log = logging.getLogger(__name__)

_ACCOUNT_ARGS = ("backer", "contributor", "account", "node", "organiser")
_AMOUNT_ARGS = ("amount", "totalWei", "refundPool", "escrow", "refunded")


def _weight(ev: ChainEvent, block_time: int) -> int:
    return int(ev.args["amount"]) * block_time  # a deposit's share of the capital weight


def _paid(ev: ChainEvent, block_time: int) -> int:
    return int(ev.args["amount"])  # wei paid to compute


# events whose run-wide running sum is kept: name -> what one event adds
_RUNNING: dict[str, Callable[[ChainEvent, int], int]] = {"Deposited": _weight, "EthClaimed": _paid}


def is_funding(event: ChainEvent) -> bool:
    return event.contract in FUNDING_CONTRACTS


def _json_safe(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value)  # uint256: beyond JSON's safe integers
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _ref(args: dict[str, Any]) -> str | None:
    if "id" in args:
        return str(int(args["id"]))
    if "root" in args:
        return "0x" + bytes(args["root"]).hex()
    if "leaseId" in args:
        return "0x" + bytes(args["leaseId"]).hex()
    return None


def _running(session: Session, run_id: str, name: str) -> int:
    text = session.exec(
        select(FundingEvent.running)
        .where(FundingEvent.run_id == run_id, FundingEvent.name == name)
        .order_by(col(FundingEvent.block_number).desc(), col(FundingEvent.log_index).desc())
    ).first()
    return int(text) if text else 0


def record(session: Session, events: Iterable[ChainEvent], times: dict[int, int]) -> int:
    """Add the rows of ``events`` (chain order; ``times``: block -> timestamp) to ``session``;
    an event already stored (same transaction hash and log index) is skipped."""
    added = 0
    running: dict[tuple[str, str], int] = {}
    for ev in events:
        seen = session.exec(
            select(FundingEvent.id).where(
                FundingEvent.tx_hash == ev.tx_hash, FundingEvent.log_index == ev.log_index
            )
        ).first()
        if seen is not None:
            continue
        args = ev.args
        run_id = "0x" + bytes(args["runId"]).hex() if "runId" in args else None
        account = next((str(args[k]) for k in _ACCOUNT_ARGS if k in args), None)
        amount = next((str(int(args[k])) for k in _AMOUNT_ARGS if k in args), None)
        row = FundingEvent(
            contract=ev.contract,
            name=ev.name,
            run_id=run_id,
            account=account,
            ref=_ref(args),
            amount=amount,
            args=json.dumps({k: _json_safe(v) for k, v in args.items()}),
            block_number=ev.block_number,
            block_time=times[ev.block_number],
            log_index=ev.log_index,
            tx_hash=ev.tx_hash,
        )
        add = _RUNNING.get(ev.name)
        if add is not None and run_id is not None:
            key = (run_id, ev.name)
            if key not in running:
                running[key] = _running(session, run_id, ev.name)
            running[key] += add(ev, row.block_time)
            row.running = str(running[key])
        session.add(row)
        added += 1
    return added


def rewind(session: Session, back: int) -> int:
    """Forget the rows of blocks above ``back`` (a reorg); return how many."""
    rows = session.exec(select(FundingEvent).where(col(FundingEvent.block_number) > back)).all()
    for row in rows:
        session.delete(row)
    count = len(rows)
    if count:
        log.warning("reorg: forgot %d RunFunding/CodeRegistry events above block %d", count, back)
    return count
