"""The dashboard's market page: the live offers, cheapest per throughput first, and a request's
ranking (the same ranking as POST /v1/market/requests, ledger/market/ranking.py)."""

from __future__ import annotations

import time
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import Engine

from ledger.chain.indexer import ChainSnapshot
from ledger.market.offers import BOOKS, matching, offer_json
from ledger.market.ranking import Request, rank
from protocol import display

GIB = 2**30
SHOWN = 200  # offers listed on the page, cheapest per throughput first


def _row(o: dict[str, Any]) -> dict[str, Any]:
    """An offer in the page's units (protocol.display): no raw bytes, wei or unix seconds."""
    per = o["cost_per_pflops_hour"]
    return {
        **o,
        "memory": display.binary_bytes(o["memory_bytes"]),
        "throughput": display.si(o["flops"], "FLOP/s"),
        "link": display.si(o["bandwidth"], "bit/s"),
        "price": display.eth(o["price_per_device_hour"]),
        "per_pflops": display.eth(per) if per is not None else "-",
        "expires": display.utc(o["expiry"]),
    }


def market(
    engine: Engine, snap: ChainSnapshot, ask: dict[str, str] | None = None
) -> dict[str, Any]:
    """The page's data; ``ask`` (the form's fields, as typed) adds a request's ranking."""
    now = int(time.time())
    with engine.connect() as conn:
        book = BOOKS.book(conn, snap)
    live = matching(book.offers, now)
    live.sort(key=lambda o: (not o.verified, o.cost_per_pflops_hour or 0, o.id))
    out: dict[str, Any] = {
        "offers": [_row(offer_json(o)) for o in live[:SHOWN]],
        "live": len(live),
        "listed": len(book),
        "ask": ask or {},
        "ranking": None,
        "error": None,
    }
    if ask:
        try:
            need = _request(ask)
        except ValueError as exc:
            out["error"] = str(exc)
            return out
        sel = rank(book, need, now)
        data = sel.as_json()
        by_id = {o.id: o for o in book.offers}
        data["chosen"] = [
            {
                **c,
                "price": display.eth(c["price_per_device_hour"]),
                "cost": display.eth(c["cost_wei"]),
            }
            for c in data["chosen"]
        ]
        for n in data["not_chosen"]:
            n["device_kind"] = by_id[n["id"]].device_kind
        data["cost"] = display.eth(data["cost_wei"])
        data["need"] = display.si(need.min_bandwidth, "bit/s")
        out["ranking"] = data
    return out


def _number(ask: dict[str, str], key: str, what: str) -> Decimal:
    try:
        value = Decimal(ask.get(key, "").strip())
    except InvalidOperation:
        raise ValueError(f"{what}: write a number (for example 8)") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"{what}: write a number of 0 or more")
    return value


def _request(ask: dict[str, str]) -> Request:
    devices = int(_number(ask, "devices", "devices"))
    hours = int(_number(ask, "hours", "hours"))
    if not 1 <= devices <= 1_000_000 or not 1 <= hours <= 100_000:
        raise ValueError("devices: 1 to 1,000,000; hours: 1 to 100,000")
    return Request(
        devices=devices,
        memory_bytes=int(_number(ask, "memory_gib", "memory per device (GiB)") * GIB),
        min_bandwidth=int(_number(ask, "bandwidth_mbit", "bandwidth (Mbit/s)") * 10**6),
        budget=int(_number(ask, "budget_eth", "budget (ETH)") * 10**18),
        hours=hours,
        verified_only=ask.get("verified_only") == "on",
    )
