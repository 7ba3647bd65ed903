"""Selection on the compute market: a run's needs against the offers, ranked, with a reason for
every offer not chosen (docs/ledger.md, "The compute market").

Pure: no database, no clock (``now`` is given), so that bench.market times exactly this.

Order: verified offers before unverified ones (an offer whose hardware challenge the ledger could
not match), then by cost per throughput (wei per PFLOP/s per hour: ``price_per_device_hour *
10^15 // flops``), then by price, then by id. Selection walks that order and takes an offer whole
(a node is one trainer) while devices are missing and the budget holds. With ``max_providers``
the offers are grouped by provider (their operator) first and providers are taken whole in the
order of their aggregate cost per throughput, so a provider whose devices are spread over many
small nodes fills a request no single node of it could (Akash's fragmentation complaint).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from protocol.display import binary_bytes, eth, si, utc

COMM_FRACTION: Final = 0.1
"""The share of a round the packet exchange may take (the rest is the inner steps)."""
PFLOPS: Final = 10**15


def min_bandwidth(packet_bytes: int, round_seconds: int, group: int) -> int:
    """The bit/s a node needs so that its round's exchange takes at most :data:`COMM_FRACTION`
    of the round: the all-gather sends its packet to, and receives one from, each of the
    ``group - 1`` other members (docs/codec.md), so ``8 * (group - 1) * packet_bytes`` bits each
    way within ``COMM_FRACTION * round_seconds``."""
    if packet_bytes < 0 or round_seconds <= 0 or group < 1:
        raise ValueError("packet_bytes >= 0, round_seconds > 0 and group >= 1")
    return math.ceil(8 * (group - 1) * packet_bytes / (COMM_FRACTION * round_seconds))


@dataclass(frozen=True, slots=True)
class Offer:
    """One node's current offer as ranked (the stored row; labels as text)."""

    id: int
    node: str
    operator: str
    device_kind: str
    device_count: int
    memory_bytes: int
    flops: int
    bandwidth: int
    region: str
    price_per_device_hour: int
    min_hours: int
    expiry: int
    verified: bool
    active: bool = True
    """Its node is still registered and staked (the ledger's view of the chain)."""
    nonce: int = 0

    @property
    def cost_per_pflops_hour(self) -> int | None:
        """wei per PFLOP/s of measured throughput per hour; None without throughput."""
        return self.price_per_device_hour * PFLOPS // self.flops if self.flops else None


@dataclass(frozen=True, slots=True)
class Request:
    """What a run needs: ``devices`` in all, each with ``memory_bytes``, every node with
    ``min_bandwidth`` bit/s, for ``hours``, within ``budget`` wei in all."""

    devices: int
    memory_bytes: int
    min_bandwidth: int
    budget: int
    hours: int
    verified_only: bool = False
    max_providers: int | None = None


@dataclass(frozen=True, slots=True)
class Reason:
    offer: Offer
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Choice:
    offer: Offer
    rank: int
    cost: int
    """wei for the request's hours: price x devices x hours."""


@dataclass
class Selection:
    chosen: list[Choice] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)
    devices: int = 0
    cost: int = 0
    filled: bool = False
    shortfall: str | None = None
    dearest_verified: int = -1
    """The highest cost per throughput among the chosen verified offers (-1: none)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "filled": self.filled,
            "devices": self.devices,
            "cost_wei": self.cost,
            "shortfall": self.shortfall,
            "chosen": [_choice_json(c) for c in self.chosen],
            "not_chosen": [
                {"id": r.offer.id, "node": r.offer.node, "code": r.code, "reason": r.message}
                for r in self.reasons
            ],
        }


def _choice_json(c: Choice) -> dict[str, Any]:
    o = c.offer
    return {
        "rank": c.rank,
        "id": o.id,
        "node": o.node,
        "operator": o.operator,
        "device_kind": o.device_kind,
        "devices": o.device_count,
        "verified": o.verified,
        "price_per_device_hour": o.price_per_device_hour,
        "cost_per_pflops_hour": o.cost_per_pflops_hour,
        "cost_wei": c.cost,
    }


def _unfit(o: Offer, req: Request, now: int) -> tuple[str, str] | None:
    """Why ``o`` cannot serve ``req`` at all, or None."""
    if not o.active:
        return "not_staked", f"node {o.node} is no longer registered and staked"
    if o.expiry <= now:
        return "expired", f"expired at {utc(o.expiry)}"
    if o.device_count == 0 or o.flops == 0:
        return "no_throughput", "offers no devices or no measured throughput"
    if o.memory_bytes < req.memory_bytes:
        return (
            "memory",
            f"{binary_bytes(o.memory_bytes)} per device, below the "
            f"{binary_bytes(req.memory_bytes)} the run needs",
        )
    if o.bandwidth < req.min_bandwidth:
        return (
            "bandwidth",
            f"measured {si(o.bandwidth, 'bit/s')}, below the {si(req.min_bandwidth, 'bit/s')} "
            "the run needs",
        )
    if o.min_hours > req.hours:
        return "min_hours", f"leases for at least {o.min_hours} h, the run asks {req.hours} h"
    if req.verified_only and not o.verified:
        return "unverified", "no matched hardware challenge, and the run takes verified offers only"
    return None


def _key(o: Offer) -> tuple[bool, int, int, int]:
    return (
        not o.verified,
        o.price_per_device_hour * PFLOPS // o.flops,
        o.price_per_device_hour,
        o.id,
    )


def rank(offers: Iterable[Offer], req: Request, now: int) -> Selection:
    """Choose offers for ``req`` at unix time ``now``; every offer not chosen gets one reason."""
    sel = Selection()
    fit: list[Offer] = []
    for o in offers:
        why = _unfit(o, req, now)
        if why is None:
            fit.append(o)
        else:
            sel.reasons.append(Reason(o, *why))
    fit.sort(key=_key)
    if req.max_providers is None:
        _take(sel, fit, req)
    else:
        _take_providers(sel, fit, req)
    sel.filled = sel.devices >= req.devices
    if not sel.filled:
        sel.shortfall = _shortfall(sel, fit, req)
    return sel


def _take(sel: Selection, offers: Sequence[Offer], req: Request) -> None:
    for o in offers:
        if sel.devices >= req.devices:
            sel.reasons.append(Reason(o, *_passed_over(o, sel)))
            continue
        cost = o.price_per_device_hour * o.device_count * req.hours
        left = req.budget - sel.cost
        if cost > left:
            sel.reasons.append(
                Reason(o, "over_budget", f"costs {eth(cost)} for {req.hours} h, {eth(left)} left")
            )
            continue
        sel.chosen.append(Choice(o, len(sel.chosen) + 1, cost))
        if o.verified:
            sel.dearest_verified = max(sel.dearest_verified, _key(o)[1])
        sel.devices += o.device_count
        sel.cost += cost


def _passed_over(o: Offer, sel: Selection) -> tuple[str, str]:
    """Why an offer that fits was not needed: ``unverified`` when a verified offer dearer per
    throughput was chosen before it (verified first), else ``not_needed``."""
    filled = f"filled by {len(sel.chosen)} offers ranked before it"
    if not o.verified and sel.dearest_verified > _key(o)[1]:
        return (
            "unverified",
            f"no matched hardware challenge: ranked after verified offers; {filled}",
        )
    return "not_needed", filled


def _take_providers(sel: Selection, offers: Sequence[Offer], req: Request) -> None:
    """Providers (operators) whole, cheapest aggregate cost per throughput first."""
    groups: dict[str, list[Offer]] = {}
    for o in offers:  # already in rank order: each group keeps it
        groups.setdefault(o.operator, []).append(o)

    def group_key(items: list[Offer]) -> tuple[bool, float, str]:
        price = sum(o.price_per_device_hour * o.device_count for o in items)
        flops = sum(o.flops * o.device_count for o in items)
        return (not all(o.verified for o in items), price / flops, items[0].operator)

    assert req.max_providers is not None
    used = 0
    for items in sorted(groups.values(), key=group_key):
        if sel.devices >= req.devices:
            sel.reasons.extend(Reason(o, *_passed_over(o, sel)) for o in items)
        elif used >= req.max_providers:
            message = f"the run takes at most {req.max_providers} providers, all taken"
            sel.reasons.extend(Reason(o, "provider_limit", message) for o in items)
        else:
            before = len(sel.chosen)
            _take(sel, items, req)
            used += len(sel.chosen) > before


def _shortfall(sel: Selection, fit: Sequence[Offer], req: Request) -> str:
    providers: dict[str, int] = {}
    for o in fit:
        providers[o.operator] = providers.get(o.operator, 0) + o.device_count
    biggest = max(providers.values(), default=0)
    return (
        f"{req.devices} devices needed, {sel.devices} chosen: {sum(providers.values())} devices "
        f"fit the run across {len(providers)} providers (the largest, its nodes grouped, has "
        f"{biggest}); see each offer's reason"
    )
