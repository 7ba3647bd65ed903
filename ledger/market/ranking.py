"""Selection on the compute market: a run's needs against the offers, ranked, with a reason for
every offer not chosen (docs/ledger.md, "The compute market").

Pure: no database, no clock (``now`` is given), so that bench.market times exactly this. The
offers are read once into columns (:class:`OfferBook`, numpy): the refusals are a few array
comparisons, the order one ``lexsort``, and Python walks only the offers it takes; the message of
a reason is written when it is read (every one in the API's answer).

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from protocol.display import binary_bytes, eth, si, utc
from protocol.eip712 import wallet_int, wallet_safe

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


_I64 = (1 << 63) - 1
# reason codes, in the order a refusal is named (the first that applies)
CODES: Final = (
    "", "not_staked", "expired", "no_throughput", "memory", "bandwidth", "min_hours",
    "unverified", "over_budget", "provider_limit", "not_needed",
)  # fmt: skip
FIT, NOT_STAKED, EXPIRED, NO_THROUGHPUT, MEMORY, BANDWIDTH, MIN_HOURS = range(7)
UNVERIFIED, OVER_BUDGET, PROVIDER_LIMIT, NOT_NEEDED = range(7, 11)
CHOSEN: Final = -1

Array = npt.NDArray[Any]


class OfferBook:
    """Offers as columns (built once per read of the offers; ranked many times)."""

    def __init__(self, offers: Iterable[Offer]) -> None:
        self.offers = list(offers)
        n = len(self.offers)

        def col(attr: str, kind: Any) -> Array:
            return np.fromiter((getattr(o, attr) for o in self.offers), kind, n)

        def capped(attr: str) -> Array:
            return np.fromiter((min(getattr(o, attr), _I64) for o in self.offers), np.int64, n)

        self.active = col("active", np.bool_)
        self.verified = col("verified", np.bool_)
        self.expiry = capped("expiry")
        self.devices = capped("device_count")
        self.memory = capped("memory_bytes")
        self.flops = capped("flops")
        self.bandwidth = capped("bandwidth")
        self.min_hours = capped("min_hours")
        self.ids = capped("id")
        self.price = np.fromiter((float(o.price_per_device_hour) for o in self.offers), float, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.cost_key = np.where(self.flops > 0, self.price / self.flops, np.inf)
        operators, self.provider = np.unique(
            np.array([o.operator for o in self.offers], dtype=object), return_inverse=True
        )
        self.operators = [str(x) for x in operators]

    def __len__(self) -> int:
        return len(self.offers)


@dataclass
class Selection:
    book: OfferBook
    request: Request
    now: int
    codes: Array
    """Per offer: :data:`CHOSEN` or its reason's index in :data:`CODES`."""
    chosen: list[Choice] = field(default_factory=list)
    over_budget: dict[int, tuple[int, int]] = field(default_factory=dict)
    """offer index -> (its cost, the budget left when it came up)."""
    devices: int = 0
    cost: int = 0
    filled: bool = False
    shortfall: str | None = None

    @property
    def reasons(self) -> list[Reason]:
        """Every offer not chosen with its reason, in the order the offers were given."""
        offers = self.book.offers
        return [
            Reason(offers[i], CODES[c], self.message(i, c))
            for i, c in enumerate(self.codes.tolist())
            if c != CHOSEN
        ]

    def message(self, i: int, code: int) -> str:
        o, req = self.book.offers[i], self.request
        if code == NOT_STAKED:
            return f"node {o.node} is no longer registered and staked"
        if code == EXPIRED:
            return f"expired at {utc(o.expiry)}"
        if code == NO_THROUGHPUT:
            return "offers no devices or no measured throughput"
        if code == MEMORY:
            return (
                f"{binary_bytes(o.memory_bytes)} per device, below the "
                f"{binary_bytes(req.memory_bytes)} the run needs"
            )
        if code == BANDWIDTH:
            return (
                f"measured {si(o.bandwidth, 'bit/s')}, below the {si(req.min_bandwidth, 'bit/s')} "
                "the run needs"
            )
        if code == MIN_HOURS:
            return f"leases for at least {o.min_hours} h, the run asks {req.hours} h"
        if code == UNVERIFIED and req.verified_only:
            return "no matched hardware challenge, and the run takes verified offers only"
        filled = f"filled by {len(self.chosen)} offers ranked before it"
        if code == UNVERIFIED:
            return f"no matched hardware challenge, ranked after verified offers; {filled}"
        if code == OVER_BUDGET:
            cost, left = self.over_budget[i]
            return f"costs {eth(cost)} for {req.hours} h, {eth(left)} left"
        if code == PROVIDER_LIMIT:
            return f"the run takes at most {req.max_providers} providers, all taken"
        return filled

    def as_json(self) -> dict[str, Any]:
        """Wallet-safe already (amounts beyond 2^53 - 1 as decimal strings), so that the API
        writes the ten thousand reasons in orjson's one C pass, not walked in Python."""
        offers = self.book.offers
        say = self._memo()
        return {
            "filled": self.filled,
            "devices": self.devices,
            "cost_wei": wallet_int(self.cost),
            "shortfall": self.shortfall,
            "chosen": wallet_safe([_choice_json(c) for c in self.chosen]),
            "not_chosen": [
                {"id": offers[i].id, "node": offers[i].node, "code": CODES[c], "reason": say(i, c)}
                for i, c in enumerate(self.codes.tolist())
                if c != CHOSEN
            ],
        }

    def _memo(self) -> Any:
        """:meth:`message`, written once per distinct message: most reasons repeat (every
        offer passed over once the request was filled says the same)."""
        seen: dict[tuple[int, Any], str] = {}
        offers = self.book.offers
        by_code = {
            NOT_STAKED: "node",
            EXPIRED: "expiry",
            MEMORY: "memory_bytes",
            BANDWIDTH: "bandwidth",
            MIN_HOURS: "min_hours",
        }

        def say(i: int, code: int) -> str:
            attr = by_code.get(code)
            key = (code, getattr(offers[i], attr) if attr else None)
            if code == OVER_BUDGET:
                key = (code, self.over_budget[i])
            text = seen.get(key)
            if text is None:
                text = seen[key] = self.message(i, code)
            return text

        return say


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


def _refusals(book: OfferBook, req: Request, now: int) -> Array:
    """Each offer's first refusal (:data:`FIT` when none), as array comparisons: the later
    assignment wins, so they run from the last-named refusal to the first."""
    codes = np.zeros(len(book), np.int8)
    if req.verified_only:
        codes[~book.verified] = UNVERIFIED
    codes[book.min_hours > min(req.hours, _I64)] = MIN_HOURS
    codes[book.bandwidth < min(req.min_bandwidth, _I64)] = BANDWIDTH
    codes[book.memory < min(req.memory_bytes, _I64)] = MEMORY
    codes[(book.devices == 0) | (book.flops == 0)] = NO_THROUGHPUT
    codes[book.expiry <= min(now, _I64)] = EXPIRED
    codes[~book.active] = NOT_STAKED
    return codes


def rank(offers: Iterable[Offer] | OfferBook, req: Request, now: int) -> Selection:
    """Choose offers for ``req`` at unix time ``now``; every offer not chosen gets one reason."""
    book = offers if isinstance(offers, OfferBook) else OfferBook(offers)
    codes = _refusals(book, req, now)
    fit = np.flatnonzero(codes == FIT)
    order = np.lexsort(
        (book.ids[fit], book.price[fit], book.cost_key[fit], ~book.verified[fit])
    )  # the last key is the first: verified, cost per throughput, price, id
    ranked = fit[order]
    sel = Selection(book, req, now, codes)
    if req.max_providers is None:
        _take(sel, ranked)
    else:
        _take_providers(sel, ranked)
    sel.filled = sel.devices >= req.devices
    if not sel.filled:
        sel.shortfall = _shortfall(sel, fit)
    return sel


def _take(sel: Selection, ranked: Array, limit: int | None = None) -> int:
    """Take offers of ``ranked`` in order while devices are missing and the budget holds; the
    rest are passed over. Returns how many of ``ranked`` it walked (``limit``: stop before
    taking from a new provider once that many providers were taken; ``ranked`` is then in
    provider order)."""
    req, book, codes = sel.request, sel.book, sel.codes
    offers = book.offers
    walked = 0
    providers: set[int] = set()
    last = -1
    for i in ranked.tolist():
        if sel.devices >= req.devices:
            break
        if limit is not None:
            group = int(book.provider[i])
            if group != last and len(providers) >= limit:
                break
            last = group
        walked += 1
        o = offers[i]
        cost = o.price_per_device_hour * o.device_count * req.hours
        left = req.budget - sel.cost
        if cost > left:
            codes[i] = OVER_BUDGET
            sel.over_budget[i] = (cost, left)
            continue
        codes[i] = CHOSEN
        sel.chosen.append(Choice(o, len(sel.chosen) + 1, cost))
        sel.devices += o.device_count
        sel.cost += cost
        if limit is not None:
            providers.add(last)
    rest = ranked[walked:]
    if sel.devices >= req.devices:
        # an unverified offer cheaper than a verified one chosen was passed over for that
        cheaper = book.cost_key[rest] < _dearest_verified(sel)
        codes[rest] = np.where(~book.verified[rest] & cheaper, UNVERIFIED, NOT_NEEDED)
    else:
        codes[rest] = PROVIDER_LIMIT
    return walked


def _dearest_verified(sel: Selection) -> float:
    keys = [c.offer.price_per_device_hour / c.offer.flops for c in sel.chosen if c.offer.verified]
    return max(keys, default=-1.0)


def _take_providers(sel: Selection, ranked: Array) -> None:
    """Providers (operators) whole, cheapest aggregate cost per throughput first: the ranked
    offers reordered by their provider's rank (each provider's offers keep their order)."""
    book = sel.book
    assert sel.request.max_providers is not None
    group = book.provider[ranked]
    groups = len(book.operators)
    weights = book.devices[ranked].astype(float)
    price = np.bincount(group, weights=book.price[ranked] * weights, minlength=groups)
    flops = np.bincount(group, weights=book.flops[ranked] * weights, minlength=groups)
    unverified = np.bincount(group, weights=~book.verified[ranked], minlength=groups)
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(flops > 0, price / flops, np.inf)
    group_rank = np.empty(groups, np.int64)
    group_rank[np.lexsort((np.arange(groups), key, unverified > 0))] = np.arange(groups)
    by_provider = ranked[np.argsort(group_rank[group], kind="stable")]
    _take(sel, by_provider, limit=sel.request.max_providers)


def _shortfall(sel: Selection, fit: Array) -> str:
    book, req = sel.book, sel.request
    per_provider = np.bincount(book.provider[fit], weights=book.devices[fit], minlength=1)
    return (
        f"{req.devices} devices needed, {sel.devices} chosen: {int(book.devices[fit].sum())} "
        f"devices fit the run across {int(np.count_nonzero(per_provider))} providers (the "
        f"largest, its nodes grouped, has {int(per_provider.max())}); see each offer's reason"
    )
