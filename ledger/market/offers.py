"""The compute market's offers: accept a signed ComputeOffer, read the nodes' current offers.

Refusals raise :class:`~protocol.errors.AttestationRejected` (the ledger's one refusal type,
its code mapped to a status by ``ledger.intake.verify.HTTP_STATUS`` and :data:`HTTP_STATUS`
here), each naming what to do. The order of the checks is the threat model's
(docs/ledger.md, "The compute market"): the cheap refusals (chain not indexed, a node not
registered or not staked, a field out of range, an expiry out of bounds) come before any
signature recovery, so an anonymous flood costs a dictionary lookup per request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, delete, func, insert, select

from ledger.chain.indexer import ChainSnapshot
from ledger.core.models import MarketOffer
from ledger.intake.challenges import matches_offer
from ledger.intake.verify import reject
from ledger.market.ranking import Offer, OfferBook
from protocol.eip712 import Eip712Domain
from protocol.errors import EncodingError, SignatureError
from protocol.offer import ComputeOffer, label_text
from protocol.signing import check_signature, recover_digest

log = logging.getLogger(__name__)

MAX_TTL_S: Final = 30 * 86400
"""The furthest an offer's expiry may lie ahead: a stale offer leaves the market within it."""
INT63: Final = 1 << 63
_STORED_UINT64 = ("memory_bytes", "flops", "bandwidth", "expiry", "nonce")
HTTP_STATUS: Final = {"expired_offer": 422, "expiry_too_far": 422, "stale_nonce": 409}
_TABLE = MarketOffer.__table__  # type: ignore[attr-defined]

ChallengeCheck = Callable[[Connection, ComputeOffer], bool]


def challenged(conn: Connection, offer: ComputeOffer) -> bool:
    """Whether ``offer``'s ``challenge`` names a passed hardware challenge of its node that
    measured at least what the offer carries (ledger.intake.challenges.matches_offer); an offer
    that names none, or more than was measured, is unverified (ranked after every verified one)."""
    return matches_offer(
        conn,
        node=str(offer.node),
        challenge=bytes(offer.challenge),
        device_count=offer.device_count,
        memory_bytes=offer.memory_bytes,
        flops=offer.flops,
    )


@dataclass(frozen=True, slots=True)
class Posted:
    id: int
    digest: str
    verified: bool
    replaced: bool
    """It replaced an offer of the node's with a lower nonce."""


def check_offer(data: dict[str, Any], snap: ChainSnapshot, now: int) -> ComputeOffer:
    """The refusals before any signature work: chain, sender, fields, expiry."""
    if snap.config is None or snap.indexed_block is None:
        raise reject(
            "chain_not_indexed", "the ledger has not indexed the chain yet: retry in a moment"
        )
    try:
        offer = ComputeOffer.from_json(data)
    except EncodingError as exc:
        raise reject("invalid_field", str(exc)) from None
    record = snap.nodes.get(offer.node)
    if record is None or not record.registered:
        raise reject(
            "unregistered_node",
            f"node {offer.node} is not registered in StakeManager: "
            "run `coloco node register` and stake first",
        )
    if not snap.is_active(offer.node):
        raise reject(
            "not_staked",
            f"node {offer.node} stakes {record.staked} wei, below the minimum "
            f"{snap.config.min_stake}: stake more (`coloco node stake`)",
        )
    for attr in _STORED_UINT64:
        if getattr(offer, attr) >= INT63:
            raise reject("invalid_field", f"{attr}: at most 2^63 - 1 on this ledger")
    if offer.device_count == 0:
        raise reject("invalid_field", "deviceCount: offer at least one device")
    for attr, name in (("device_kind", "deviceKind"), ("region", "region")):
        if label_text(getattr(offer, attr)).startswith("0x"):
            raise reject(
                "invalid_field",
                f"{name}: not a label (1-32 of a-z, 0-9, '.', '_', '-', zero padded): "
                "sign it with protocol.offer.label_bytes32",
            )
    if offer.expiry <= now:
        raise reject("expired_offer", f"expired at {offer.expiry} (now {now}): sign a later expiry")
    if offer.expiry > now + MAX_TTL_S:
        raise reject(
            "expiry_too_far",
            f"expiry {offer.expiry} is more than {MAX_TTL_S // 86400} days ahead: "
            "sign an earlier one (and a new offer before it passes)",
        )
    return offer


def post_offer(
    conn: Connection,
    data: dict[str, Any],
    signature: str,
    domain: Eip712Domain,
    snap: ChainSnapshot,
    *,
    now: int,
    challenges: ChallengeCheck = challenged,
) -> Posted:
    """Verify and store a signed offer in ``conn``'s transaction (the caller commits).

    Re-posting the node's current offer answers it again; an offer whose nonce is not above the
    node's current one is refused (a replay, or a withdrawn offer)."""
    offer = check_offer(data, snap, now)
    try:
        sig = check_signature(signature)
        digest = offer.digest(domain)
        signer = recover_digest(digest, sig)
    except SignatureError as exc:
        raise reject("bad_signature", str(exc)) from None
    if signer != offer.node:
        raise reject(
            "signer_mismatch",
            f"offer signature recovers to {signer}, not to node {offer.node}: sign the "
            "ComputeOffer with the node's key (GET /v1/eip712 for the domain)",
        )
    digest_hex = "0x" + digest.hex()
    current = conn.execute(
        select(_TABLE.c.id, _TABLE.c.digest, _TABLE.c.nonce, _TABLE.c.verified).where(
            _TABLE.c.node == offer.node
        )
    ).first()
    if current is not None and current.digest == digest_hex:
        return Posted(current.id, digest_hex, bool(current.verified), replaced=False)
    if current is not None and offer.nonce <= current.nonce:
        raise reject(
            "stale_nonce",
            f"nonce {offer.nonce} is not above the node's current offer's {current.nonce}: "
            f"sign the offer with nonce {current.nonce + 1}",
        )
    verified = bool(any(offer.challenge) and challenges(conn, offer))
    row = _row(offer, digest_hex, sig, snap, verified)
    if current is not None:
        conn.execute(delete(_TABLE).where(_TABLE.c.id == current.id))
    new_id = conn.execute(insert(_TABLE).values(**row).returning(_TABLE.c.id)).scalar_one()
    log.info("market offer %d from %s (nonce %d)", new_id, offer.node, offer.nonce)
    return Posted(int(new_id), digest_hex, verified, replaced=current is not None)


def _row(
    offer: ComputeOffer, digest: str, sig: bytes, snap: ChainSnapshot, verified: bool
) -> dict[str, Any]:
    record = snap.nodes[offer.node]
    return {
        "digest": digest,
        "node": offer.node,
        "operator": record.operator or offer.node,
        "device_kind": "0x" + offer.device_kind.hex(),
        "device_count": offer.device_count,
        "memory_bytes": offer.memory_bytes,
        "flops": offer.flops,
        "bandwidth": offer.bandwidth,
        "region": "0x" + offer.region.hex(),
        "price_per_device_hour": str(offer.price_per_device_hour),
        "min_hours": offer.min_hours,
        "expiry": offer.expiry,
        "nonce": offer.nonce,
        "challenge": "0x" + offer.challenge.hex(),
        "signature": "0x" + sig.hex(),
        "verified": verified,
    }


def _label(hexed: str) -> str:
    return label_text(bytes.fromhex(hexed[2:]))


def offer_of(row: Any, snap: ChainSnapshot) -> Offer:
    """A stored row as the ranking reads it (``active``: its node is still staked)."""
    return Offer(
        id=int(row.id),
        node=row.node,
        operator=row.operator,
        device_kind=_label(row.device_kind),
        device_count=int(row.device_count),
        memory_bytes=int(row.memory_bytes),
        flops=int(row.flops),
        bandwidth=int(row.bandwidth),
        region=_label(row.region),
        price_per_device_hour=int(row.price_per_device_hour),
        min_hours=int(row.min_hours),
        expiry=int(row.expiry),
        verified=bool(row.verified),
        active=snap.is_active(row.node),
        nonce=int(row.nonce),
    )


def all_offers(conn: Connection, snap: ChainSnapshot) -> list[Offer]:
    """Every node's current offer (at most one per registered node), in id order."""
    rows = conn.execute(select(_TABLE).order_by(_TABLE.c.id)).all()
    return [offer_of(r, snap) for r in rows]


class BookCache:
    """The offers as ranked (:class:`OfferBook`), read again only when they may have changed:
    another row count or highest id (an offer is only ever added, or replaced by a new row with
    an id above every one before: the table never reuses an id),
    another database, or another view of the nodes or of the config (the indexer replaces its
    snapshot's ``nodes`` dictionary and ``config`` when a node's stake or the minimum changes,
    in the same snapshot object). A request between two such changes ranks the columns already
    built."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[Any, ...] | None = None
        self._view: tuple[object, object] | None = None  # held: compared by identity
        self._book: OfferBook | None = None

    def book(self, conn: Connection, snap: ChainSnapshot) -> OfferBook:
        count, top = conn.execute(select(func.count(), func.max(_TABLE.c.id))).one()
        key = (str(conn.engine.url), count, top)
        view = (snap.nodes, snap.config)
        with self._lock:
            held = self._view or (None, None)
            same = key == self._key and held[0] is view[0] and held[1] is view[1]
            if same and self._book is not None:
                return self._book
        book = OfferBook(all_offers(conn, snap))
        with self._lock:
            self._key, self._view, self._book = key, view, book
        return book


BOOKS = BookCache()


def offer_json(o: Offer) -> dict[str, Any]:
    return {
        "id": o.id,
        "node": o.node,
        "operator": o.operator,
        "device_kind": o.device_kind,
        "device_count": o.device_count,
        "memory_bytes": o.memory_bytes,
        "flops": o.flops,
        "bandwidth": o.bandwidth,
        "region": o.region,
        "price_per_device_hour": o.price_per_device_hour,
        "cost_per_pflops_hour": o.cost_per_pflops_hour,
        "min_hours": o.min_hours,
        "expiry": o.expiry,
        "nonce": o.nonce,
        "verified": o.verified,
        "active": o.active,
    }


def matching(
    offers: Iterable[Offer],
    now: int,
    *,
    node: str | None = None,
    operator: str | None = None,
    device_kind: str | None = None,
    region: str | None = None,
    min_memory: int = 0,
    min_devices: int = 0,
    verified: bool | None = None,
    include_expired: bool = False,
) -> list[Offer]:
    """GET /v1/market/offers' filters (addresses compared case-insensitively)."""
    node_l, op_l = (node or "").lower(), (operator or "").lower()
    return [
        o
        for o in offers
        if (not node_l or o.node.lower() == node_l)
        and (not op_l or o.operator.lower() == op_l)
        and (device_kind is None or o.device_kind == device_kind)
        and (region is None or o.region == region)
        and o.memory_bytes >= min_memory
        and o.device_count >= min_devices
        and (verified is None or o.verified == verified)
        and (include_expired or (o.expiry > now and o.active))
    ]
