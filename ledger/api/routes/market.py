"""The compute market: POST /v1/market/offers (a node's signed ComputeOffer), GET
/v1/market/offers (the nodes' current offers, filtered, paged) and POST /v1/market/requests (a
run's needs -> the ranked choice and a reason for every offer not chosen).

Who may send what, the worst case and its bound: docs/ledger.md, "The compute market".
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict
from sqlalchemy.exc import IntegrityError

from ledger.api.deps import JSON_BODY, DomainDep, SessionDep, SnapshotDep
from ledger.api.errors import errors, json_response
from ledger.core.schemas import (
    AddressStr,
    SignatureHex,
    Uint256,
    WireStruct,
    wire_model,
    wire_type,
)
from ledger.intake.verify import reject
from ledger.market.offers import BOOKS, matching, offer_json, post_offer
from ledger.market.ranking import Request, min_bandwidth, rank
from protocol.eip712 import wallet_int
from protocol.offer import OFFER_SPEC

router = APIRouter(prefix="/market", tags=["market"])

LIMIT, LIMIT_MAX = 100, 1000  # offers listed per page: the default and the most
_INT63 = 1 << 63
_STRICT = ConfigDict(extra="forbid", strict=True)

if TYPE_CHECKING:
    OfferFields = WireStruct
else:
    OfferFields = wire_model(
        "OfferFields",
        OFFER_SPEC,
        "The ComputeOffer in its camelCase wire form (docs/interfaces.md).",
    )


class OfferIn(BaseModel):
    """POST /v1/market/offers body."""

    model_config = _STRICT

    offer: OfferFields
    signature: SignatureHex


_DEVICES = wire_type("uint32", least=1, bits=20)  # 1 .. 2^20 - 1
_HOURS = wire_type("uint32", least=1, bits=17)  # 1 .. 131071 (15 years)
_U63 = wire_type("uint64", bits=63)


class GivenBandwidth(BaseModel):
    """The bit/s each node needs, as the organiser states it."""

    model_config = _STRICT

    bit_per_s: _U63  # type: ignore[valid-type]


class DerivedBandwidth(BaseModel):
    """The run's packet and round time: the ledger derives the bit/s each node needs
    (ledger.market.ranking.min_bandwidth; ``group``, the all-gather's members, by default
    ``devices``)."""

    model_config = _STRICT

    packet_bytes: _U63  # type: ignore[valid-type]
    round_seconds: wire_type("uint64", least=1, bits=63)  # type: ignore[valid-type]
    group: _DEVICES | None = None  # type: ignore[valid-type]


class RequestIn(BaseModel):
    """POST /v1/market/requests body: what a run needs (devices in all, memory per device,
    hours, the budget in wei for all of them, each node's bandwidth)."""

    model_config = _STRICT

    devices: _DEVICES  # type: ignore[valid-type]
    memory_bytes: _U63  # type: ignore[valid-type]
    hours: _HOURS  # type: ignore[valid-type]
    budget: Uint256
    bandwidth: GivenBandwidth | DerivedBandwidth
    verified_only: bool = False
    max_providers: _DEVICES | None = None  # type: ignore[valid-type]

    def need(self) -> Request:
        bw = self.bandwidth
        if isinstance(bw, GivenBandwidth):
            bandwidth = int(bw.bit_per_s)
        else:
            group = int(bw.group or self.devices)
            bandwidth = min_bandwidth(int(bw.packet_bytes), int(bw.round_seconds), group)
        return Request(
            devices=int(self.devices),
            memory_bytes=int(self.memory_bytes),
            min_bandwidth=bandwidth,
            budget=int(self.budget),
            hours=int(self.hours),
            verified_only=self.verified_only,
            max_providers=None if self.max_providers is None else int(self.max_providers),
        )


def _now() -> int:
    return int(time.time())


@router.get("/eip712")
def offer_eip712(domain: DomainDep) -> dict[str, Any]:
    """The domain, types and primaryType a wallet needs to sign a ComputeOffer."""
    return OFFER_SPEC.signing_schema(domain)


@router.post(
    "/offers",
    status_code=202,
    responses=errors(400, 403, 409, 413, 415, 422, 503),
    dependencies=JSON_BODY,
)
def post_market_offer(
    body: OfferIn, session: SessionDep, domain: DomainDep, snapshot: SnapshotDep
) -> Response:
    """Offer a registered, staked node's measured hardware at a price. A higher nonce replaces
    the node's offer; re-posting the current one answers it again."""
    conn = session.connection()
    try:
        posted = post_offer(
            conn, body.offer.model_dump(), body.signature, domain, snapshot, now=_now()
        )
        session.commit()
    except IntegrityError:
        session.rollback()
        raise reject(
            "stale_nonce",
            "another offer of this node was stored at the same moment: read "
            "GET /v1/market/offers?node=... and sign a higher nonce",
        ) from None
    return json_response(
        {
            "id": posted.id,
            "status": "accepted",
            "digest": posted.digest,
            "verified": posted.verified,
            "replaced": posted.replaced,
        },
        202,
    )


@router.get("/offers", responses=errors(422, 503))
def list_market_offers(
    session: SessionDep,
    snapshot: SnapshotDep,
    *,
    node: AddressStr | None = None,
    operator: AddressStr | None = None,
    device_kind: Annotated[str | None, Query(max_length=32)] = None,
    region: Annotated[str | None, Query(max_length=32)] = None,
    min_memory: Annotated[int, Query(ge=0, lt=_INT63)] = 0,
    min_devices: Annotated[int, Query(ge=0, lt=_INT63)] = 0,
    verified: bool | None = None,
    include_expired: bool = False,
    limit: Annotated[int, Query(ge=1, le=LIMIT_MAX)] = LIMIT,
    before: Annotated[int | None, Query(ge=1, description="offers with a smaller id")] = None,
) -> Response:
    """The nodes' current offers, newest first (live ones only unless ``include_expired``:
    an expired offer or one whose node is no longer staked). ``next_before``: the next page's
    ``before``, or null."""
    now = _now()
    found = matching(
        BOOKS.book(session.connection(), snapshot).offers,
        now,
        node=node,
        operator=operator,
        device_kind=device_kind,
        region=region,
        min_memory=min_memory,
        min_devices=min_devices,
        verified=verified,
        include_expired=include_expired,
    )
    found.sort(key=lambda o: -o.id)
    if before is not None:
        found = [o for o in found if o.id < before]
    page = found[:limit]
    return json_response(
        {
            "offers": [offer_json(o) for o in page],
            "next_before": page[-1].id if len(found) > limit else None,
            "now": now,
        }
    )


@router.post("/requests", responses=errors(400, 413, 415, 422, 503), dependencies=JSON_BODY)
def post_market_request(body: RequestIn, session: SessionDep, snapshot: SnapshotDep) -> Response:
    """Rank every node's current offer against a run's needs: the choice, in rank order, and
    for every offer not chosen its reason. Nothing is stored."""
    need = body.need()
    now = _now()
    selection = rank(BOOKS.book(session.connection(), snapshot), need, now)
    return json_response(
        {
            "request": {
                "devices": need.devices,
                "memory_bytes": wallet_int(need.memory_bytes),
                "min_bandwidth": wallet_int(need.min_bandwidth),
                "budget": wallet_int(need.budget),
                "hours": need.hours,
                "verified_only": need.verified_only,
                "max_providers": need.max_providers,
            },
            "now": now,
            **selection.as_json(),
        }
    )
