"""Selection on the compute market: order, a reason for every offer not chosen, provider grouping
(ledger/market/ranking.py; pure, so no ledger is needed)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ledger.market.ranking import Offer, Request, min_bandwidth, rank

NOW = 1_800_000_000
GIB = 2**30


def offer(id: int, **fields: Any) -> Offer:
    values: dict[str, Any] = {
        "id": id,
        "node": f"0x{id:040x}",
        "operator": f"0x{id:040x}",
        "device_kind": "nvidia-h200",
        "device_count": 1,
        "memory_bytes": 80 * GIB,
        "flops": 50 * 10**12,
        "bandwidth": 10**9,
        "region": "eu-west",
        "price_per_device_hour": 10**15,
        "min_hours": 1,
        "expiry": NOW + 3600,
        "verified": True,
    }
    values.update(fields)
    return Offer(**values)


REQ = Request(devices=2, memory_bytes=40 * GIB, min_bandwidth=10**8, budget=10**18, hours=2)


def test_cheapest_per_throughput_first_and_every_other_has_a_reason() -> None:
    offers = [
        offer(1, price_per_device_hour=3 * 10**15, flops=100 * 10**12),  # 30/PFLOPs: 2nd
        offer(2, price_per_device_hour=10**15, flops=10 * 10**12),  # 100/PFLOPs: 4th
        offer(3, price_per_device_hour=2 * 10**15, flops=100 * 10**12),  # 20/PFLOPs: 1st
        offer(4, price_per_device_hour=5 * 10**15, flops=100 * 10**12),  # 50: 3rd
    ]
    sel = rank(offers, REQ, NOW)
    assert [c.offer.id for c in sel.chosen] == [3, 1]
    assert sel.filled and sel.devices == 2
    assert sel.cost == (2 + 3) * 10**15 * 2
    assert {r.offer.id: r.code for r in sel.reasons} == {4: "not_needed", 2: "not_needed"}
    assert len(sel.chosen) + len(sel.reasons) == len(offers)


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"expiry": NOW}, "expired"),
        ({"memory_bytes": 40 * GIB - 1}, "memory"),
        ({"bandwidth": 10**8 - 1}, "bandwidth"),
        ({"min_hours": 3}, "min_hours"),
        ({"flops": 0}, "no_throughput"),
        ({"device_count": 0}, "no_throughput"),
        ({"active": False}, "not_staked"),
        ({"price_per_device_hour": 10**18}, "over_budget"),
    ],
)
def test_each_refusal_names_its_reason(fields: dict[str, Any], code: str) -> None:
    good = offer(1)
    bad = offer(2, **fields)
    sel = rank([good, bad], REQ, NOW)
    assert [c.offer.id for c in sel.chosen] == [1]
    assert [(r.offer.id, r.code) for r in sel.reasons] == [(2, code)]
    assert sel.reasons[0].message
    # at the bound itself the offer fits (the guard is exact)
    edge = {
        "expired": {"expiry": NOW + 1},
        "memory": {"memory_bytes": 40 * GIB},
        "bandwidth": {"bandwidth": 10**8},
        "min_hours": {"min_hours": 2},
    }.get(code)
    if edge:
        assert [c.offer.id for c in rank([good, offer(2, **edge)], REQ, NOW).chosen] == [1, 2]


def test_budget_is_the_sum_of_the_chosen() -> None:
    # 1 and 2 cost 2 * 10^17 each for 2 h, 3 (last by cost per throughput) 2 * 10^16: a budget
    # of 3 * 10^17 takes 1, passes over 2 and still takes 3
    offers = [offer(i, price_per_device_hour=10**17, flops=(10 - i) * 10**12) for i in (1, 2)]
    offers.append(offer(3, price_per_device_hour=10**16, flops=10**10))
    sel = rank(offers, replace(REQ, devices=3, budget=3 * 10**17), NOW)
    assert [c.offer.id for c in sel.chosen] == [1, 3]
    assert [(r.offer.id, r.code) for r in sel.reasons] == [(2, "over_budget")]
    assert sel.cost <= 3 * 10**17


def test_verified_before_unverified_and_verified_only() -> None:
    cheap_unverified = offer(1, price_per_device_hour=1, verified=False)
    dear_verified = [offer(i, price_per_device_hour=10**15) for i in (2, 3)]
    sel = rank([cheap_unverified, *dear_verified], REQ, NOW)
    assert [c.offer.id for c in sel.chosen] == [2, 3]
    assert [(r.offer.id, r.code) for r in sel.reasons] == [(1, "unverified")]
    # taken when verified ones fall short, unless the run takes verified offers only
    sel = rank([cheap_unverified, dear_verified[0]], REQ, NOW)
    assert [c.offer.id for c in sel.chosen] == [2, 1] and sel.filled
    sel = rank([cheap_unverified, dear_verified[0]], replace(REQ, verified_only=True), NOW)
    assert [c.offer.id for c in sel.chosen] == [2] and not sel.filled
    assert sel.reasons[0].code == "unverified"


def test_a_providers_small_nodes_grouped_fill_what_no_single_node_can() -> None:
    """Four 2-device nodes of operator A fill an 8-device request from one provider; B's single
    4-device node is cheaper per throughput but cannot, so it gets a reason, not the request."""
    a = "0x" + "aa" * 20
    b = "0x" + "bb" * 20
    spread = [offer(i, operator=a, device_count=2) for i in range(1, 5)]
    big = offer(9, operator=b, device_count=4, price_per_device_hour=10**14)
    req = replace(REQ, devices=8, max_providers=1)
    sel = rank([big, *spread], req, NOW)
    assert not sel.filled  # B ranks first (cheaper) and takes the one provider slot
    assert "devices fit the run across 2 providers (the largest, its nodes grouped, has 8)" in (
        sel.shortfall or ""
    )
    sel = rank([replace(big, price_per_device_hour=10**16), *spread], req, NOW)
    assert sel.filled and {c.offer.operator for c in sel.chosen} == {a}
    assert [(r.offer.id, r.code) for r in sel.reasons] == [(9, "not_needed")]
    two = rank([big, *spread], replace(req, max_providers=2, devices=10), NOW)
    assert two.filled and two.devices == 10  # B whole, then three of A's nodes
    capped = rank([big, *spread], replace(req, max_providers=1, devices=2), NOW)
    assert {r.code for r in capped.reasons} == {"not_needed"}


def test_provider_limit_reason() -> None:
    sel = rank(
        [offer(1, device_count=1), offer(2, device_count=1, price_per_device_hour=2 * 10**15)],
        replace(REQ, max_providers=1),
        NOW,
    )
    assert [c.offer.id for c in sel.chosen] == [1] and not sel.filled
    assert [(r.offer.id, r.code) for r in sel.reasons] == [(2, "provider_limit")]


def test_unfillable_names_the_shortfall() -> None:
    sel = rank([offer(1, memory_bytes=GIB)], REQ, NOW)
    assert not sel.filled and sel.chosen == []
    assert sel.shortfall is not None and "2 devices needed, 0 chosen" in sel.shortfall


def test_min_bandwidth_formula() -> None:
    # 100 MB packets, 4 members, a 10-minute round: 3 * 800 Mbit within 60 s = 40 Mbit/s
    assert min_bandwidth(100 * 10**6, 600, 4) == 40 * 10**6
    assert min_bandwidth(10**6, 600, 1) == 0
    with pytest.raises(ValueError):
        min_bandwidth(1, 0, 2)


def test_bench_market_in_process_figures() -> None:
    """bench.market's in-process half on its 10,000 offers: every key, a reason for every offer
    not chosen (a smoke run; the speed is the bench's to report, not a test's)."""
    from bench.market import in_process, synthetic_offers

    figures = in_process(reps=3)
    assert figures["offers"] == 10_000 and figures["reasons_given_ratio"] == 1.0
    assert {"rank_p50_ms", "rank_p99_ms", "book_ms"} <= set(figures)
    codes = {r.code for r in rank(synthetic_offers(), REQ, NOW).reasons}
    assert {"expired", "memory", "bandwidth", "min_hours", "no_throughput", "not_needed"} <= codes
