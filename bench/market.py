"""`python -m bench.market [--quick] [--no-http]`: ranking the compute market's offers.

Two measurements of one thing, ranking 10,000 offers against a run's request (the target: p99
<= 50 ms, issue 30):

- ``rank_p99_ms`` / ``rank_p50_ms``: in process, the ranking function alone
  (``ledger.market.ranking.rank``) on 10,000 offers already read into columns (an ``OfferBook``,
  built once: ``book_ms``), each call timed, messages of the reasons not written (they are
  written when read: the endpoint writes them all);
- ``http_p99_ms`` / ``http_p50_ms``: through the endpoint, ``POST /v1/market/requests`` of a real
  ledger (uvicorn on 127.0.0.1, SQLite, a real anvil with the contracts deployed) whose database
  holds the 10,000 offers: the request's parsing, the rows read, the ranking and the response
  (every offer's reason, about 1.5 MB of JSON) written and read back by the client. A few offers
  are posted and signed for real by registered, staked nodes (``http_posted``); registering 10,000
  nodes on anvil would take an hour, so the other rows are written to the table directly and their
  nodes entered in the indexer's snapshot as registered and staked.

The offers are drawn from a fixed seed: 2,000 providers of 1-8 nodes, 1-8 devices each, every
kind of unfit offer among them (expired, too little memory or bandwidth, a minimum lease too
long, no throughput, unverified), so every reason path runs. ``reasons_given_ratio``: the share
of the offers not chosen that got a reason (target 1.0). When ``bench.market_challenge`` is
importable its ``figures(quick)`` are merged in (the hardware challenge's figures).

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

log = logging.getLogger("bench.market")

OFFERS = 10_000
GIB = 2**30
NOW = 1_800_000_000


def synthetic_offers(n: int = OFFERS, *, now: int = NOW, seed: int = 30) -> list[Any]:
    """``n`` offers of ~2,000 providers, deterministic; about one in five unfit in some way."""
    from ledger.market.ranking import Offer

    rng = random.Random(seed)
    offers = []
    for i in range(n):
        provider = rng.randrange(2000)
        unfit = rng.random()
        offers.append(
            Offer(
                id=i + 1,
                node=f"0x{i + 1:040x}",
                operator=f"0x{0xA0000000 + provider:040x}",
                device_kind=rng.choice(["nvidia-h200", "nvidia-a100", "nvidia-l4", "cpu"]),
                device_count=rng.randint(1, 8),
                memory_bytes=rng.choice([24, 40, 80, 141]) * GIB,
                flops=rng.randint(5, 900) * 10**12 if unfit > 0.02 else 0,
                bandwidth=rng.randint(10, 100_000) * 10**6,
                region=rng.choice(["eu-west", "us-east", "ap-south"]),
                price_per_device_hour=rng.randint(1, 5000) * 10**12,
                min_hours=rng.choice([1, 1, 1, 2, 4, 48]),
                expiry=now + rng.randint(-3600, 86400) if unfit < 0.1 else now + 86400,
                verified=rng.random() < 0.5,
            )
        )
    return offers


def request_of(**changes: Any) -> Any:
    from ledger.market.ranking import Request

    values: dict[str, Any] = {
        "devices": 256,
        "memory_bytes": 40 * GIB,
        "min_bandwidth": 200 * 10**6,
        "budget": 10**18,
        "hours": 4,
    }
    values.update(changes)
    return Request(**values)


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def in_process(reps: int) -> dict[str, Any]:
    from ledger.market.ranking import OfferBook, rank

    offers = synthetic_offers()
    start = time.perf_counter()
    book = OfferBook(offers)  # the offers read into columns, once per read of the table
    book_ms = (time.perf_counter() - start) * 1000
    requests = [request_of(), request_of(max_providers=20), request_of(verified_only=True)]
    times: list[float] = []
    ratios: list[float] = []
    for req in requests:  # warm-up: numpy's first calls, not the ranking's cost
        rank(book, req, NOW)
    for i in range(reps):
        req = requests[i % len(requests)]
        start = time.perf_counter()
        sel = rank(book, req, NOW)
        times.append((time.perf_counter() - start) * 1000)
        not_chosen = len(offers) - len(sel.chosen)
        if i < len(requests):  # every reason's message written (outside the timing)
            reasoned = {r.offer.id for r in sel.reasons if r.code and r.message}
            ratios.append(len(reasoned) / not_chosen if not_chosen else 1.0)
            assert len(sel.chosen) + len(sel.reasons) == len(offers)
    return {
        "offers": len(offers),
        "rank_p50_ms": round(statistics.median(times), 2),
        "rank_p99_ms": round(_percentile(times, 0.99), 2),
        "rank_calls": reps,
        "book_ms": round(book_ms, 2),
        "reasons_given_ratio": min(ratios),
    }


def through_http(reps: int, work: Path) -> dict[str, Any]:
    import httpx
    import uvicorn
    from pydantic import SecretStr
    from sqlalchemy import insert

    from bench.harness.nodes import domain_of, new_node
    from ledger.core.config import Settings
    from ledger.core.models import MarketOffer, Node
    from ledger.main import create_app
    from ledger.service import Ledger
    from protocol.deploy import deploy
    from protocol.devnet import AnvilProcess, free_port
    from protocol.eip712 import to_checksum_address
    from protocol.offer import ComputeOffer, label_bytes32
    from protocol.signing import sign_digest
    from protocol.types import Address, Bytes32

    anvil = AnvilProcess.start(work / "anvil")
    try:
        dep_path = work / "deployment.json"
        dep = deploy(
            anvil.rpc_url, anvil.accounts[0][1], committer=anvil.accounts[1][0], out_path=dep_path
        )
        real = [new_node(anvil.w3, dep, anvil.accounts[2 + i % 6][0]) for i in range(6)]
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,  # the settings' own validators read the strings (as from the env)
            environment="test",
            rpc_url=anvil.rpc_url,
            deployment=dep_path,
            committer_private_key=SecretStr(anvil.accounts[1][1]),
            database_url=f"sqlite:///{work / 'ledger.db'}",
            blob_dir=work / "blobs",
            admin_token=SecretStr("bench-market-admin-token-0123"),
            run_background=False,
        )
        ledger = Ledger(settings)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(ledger=ledger), host="127.0.0.1", port=port, log_level="warning"
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        try:
            ledger.indexer.catch_up()
            domain = domain_of(dep)
            now = int(time.time())
            for i, node in enumerate(real):  # real signed offers through the endpoint
                offer = ComputeOffer(
                    node=Address(node.address),
                    device_kind=label_bytes32("nvidia-h200"),
                    device_count=8,
                    memory_bytes=141 * GIB,
                    flops=(60 + i) * 10**12,
                    bandwidth=10 * 10**9,
                    region=label_bytes32("eu-west"),
                    price_per_device_hour=(2 + i) * 10**15,
                    min_hours=1,
                    expiry=now + 3600,
                    nonce=1,
                    challenge=Bytes32(bytes(32)),
                )
                sig = sign_digest(offer.digest(domain), node.key)
                r = httpx.post(
                    f"{url}/v1/market/offers",
                    json={"offer": offer.to_json(), "signature": "0x" + sig.hex()},
                    timeout=30,
                )
                assert r.status_code == 202, r.text
            rest = synthetic_offers(OFFERS - len(real), now=now)
            snap = ledger.indexer.snapshot
            stake = str(snap.config.min_stake if snap.config else 10**18)
            rows = []
            for o in rest:
                addr = to_checksum_address(o.node)
                snap.nodes[addr] = Node(
                    address=addr, operator=o.operator, payout=addr, staked=stake,
                    registered=True, updated_block=0,
                )  # fmt: skip
                rows.append(_row(replace(o, node=addr)))
            with ledger.engine.begin() as conn:
                conn.execute(insert(MarketOffer.__table__), rows)  # type: ignore[attr-defined]
            body = {
                "devices": 256,
                "memory_bytes": 40 * GIB,
                "hours": 4,
                "budget": str(10**18),
                "bandwidth": {"packet_bytes": 100 * 10**6, "round_seconds": 600, "group": 8},
            }
            times: list[float] = []
            with httpx.Client(timeout=60) as client:
                client.post(f"{url}/v1/market/requests", json=body)  # warm-up: reads the offers
                for _ in range(reps):
                    start = time.perf_counter()
                    r = client.post(f"{url}/v1/market/requests", json=body)
                    data = r.json()
                    times.append((time.perf_counter() - start) * 1000)
                    assert r.status_code == 200, r.text
            ranked = len(data["chosen"]) + len(data["not_chosen"])
            assert ranked == OFFERS, ranked
            return {
                "http_offers": ranked,
                "http_posted": len(real),
                "http_p50_ms": round(statistics.median(times), 2),
                "http_p99_ms": round(_percentile(times, 0.99), 2),
                "http_calls": reps,
                "http_response_bytes": len(r.content),
            }
        finally:
            server.should_exit = True
            thread.join(timeout=30)
            ledger.stop()
    finally:
        anvil.stop()


def _row(o: Any) -> dict[str, Any]:
    def hexed(label: str) -> str:
        return "0x" + label.encode().ljust(32, b"\0").hex()

    return {
        "digest": f"0x{o.id:064x}",
        "node": o.node,
        "operator": o.operator,
        "device_kind": hexed(o.device_kind),
        "device_count": o.device_count,
        "memory_bytes": o.memory_bytes,
        "flops": o.flops,
        "bandwidth": o.bandwidth,
        "region": hexed(o.region),
        "price_per_device_hour": str(o.price_per_device_hour),
        "min_hours": o.min_hours,
        "expiry": o.expiry,
        "nonce": 1,
        "challenge": "0x" + "00" * 32,
        "signature": "0x" + "00" * 65,
        "verified": o.verified,
    }


def challenge_figures(quick: bool) -> dict[str, Any]:
    """The hardware challenge's figures (bench/market_challenge.py), when that module exists."""
    try:
        module = importlib.import_module("bench.market_challenge")
    except ModuleNotFoundError as exc:
        if exc.name != "bench.market_challenge":
            raise
        log.info("bench.market_challenge not present: no challenge figures")
        return {}
    figures: dict[str, Any] = module.figures(quick)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    parser.add_argument("--no-http", action="store_true", help="skip the endpoint (no anvil)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    reps, http_reps = (100, 20) if args.quick else (1000, 200)
    out: dict[str, Any] = {"quick": args.quick}
    out.update(in_process(reps))
    if not args.no_http:
        with tempfile.TemporaryDirectory(prefix="bench-market-") as tmp:
            out.update(through_http(http_reps, Path(tmp)))
    out.update(challenge_figures(args.quick))
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
