"""Reads never starve writes: 8 writers and 16 readers against a real uvicorn server.

Before the writes left the event loop this froze the ledger: the loop blocked on the pool
inside the group commit, while the pooled connections were held by read routes whose
completion needed the loop. Every request must now be answered, none with an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.config import Settings
from ledger.service import Ledger
from tests.ledger.conftest import ADMIN, GENESIS, serving
from tests.ledger.helpers import body

WRITERS, READERS = 8, 16


@pytest.fixture
def server(settings_for: Callable[..., Settings], sqlite_url: str) -> Iterator[tuple[str, Ledger]]:
    ledger = Ledger(settings_for(sqlite_url))
    try:
        with serving(ledger) as url:
            yield url, ledger
    finally:
        ledger.stop()


async def _load(url: str, posts: list[dict[str, Any]], reads: list[str], seconds: float) -> dict:
    counts = {"writes": 0, "reads": 0, "errors": 0, "max_s": 0.0}
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=WRITERS + READERS)
    async with httpx.AsyncClient(base_url=url, timeout=20.0, limits=limits) as http:

        async def one(kind: str, send: Callable[[], Any]) -> None:
            t0 = time.monotonic()
            try:
                r = await send()
                ok = r.status_code < 500
            except httpx.HTTPError:
                ok = False
            counts["max_s"] = max(counts["max_s"], time.monotonic() - t0)
            counts[kind if ok else "errors"] += 1

        async def writer(i: int) -> None:
            n = i
            while time.monotonic() < stop:
                post = posts[n % len(posts)]
                await one("writes", lambda p=post: http.post("/v1/attestations", json=p))
                n += 1

        async def reader(i: int) -> None:
            n = i
            while time.monotonic() < stop:
                path = reads[n % len(reads)]
                await one("reads", lambda p=path: http.get(p))
                n += 1

        await asyncio.gather(
            *(writer(i) for i in range(WRITERS)), *(reader(i) for i in range(READERS))
        )
    return counts


def test_sixteen_readers_do_not_freeze_eight_writers(
    server: tuple[str, Ledger], nodes: list[NodeKey], domain: object
) -> None:
    url, ledger = server
    run = h("run-readers")
    r = httpx.post(
        f"{url}/v1/runs",
        json={"run_id": run, "genesis_checkpoint": GENESIS},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
    )
    assert r.status_code == 201, r.text
    ledger.indexer.catch_up()
    posts = [
        body(
            attestation(node, run_id=run, round_=rnd, base=GENESIS, result=h(f"r{rnd}")),
            node.key,
            domain,  # type: ignore[arg-type]
        )
        for node in nodes
        for rnd in (1, 2)
    ]
    reads = [
        f"/v1/runs/{run}/rounds",
        f"/v1/nodes/{nodes[0].address}",
        f"/v1/rewards/{nodes[1].payout}",
        f"/v1/runs/{run}/rounds/1",
    ]
    counts = asyncio.run(_load(url, posts, reads, seconds=4.0))
    assert counts["errors"] == 0, counts
    assert counts["writes"] >= WRITERS and counts["reads"] >= READERS, counts
    assert httpx.get(f"{url}/v1/health/live", timeout=5).status_code == 200


@pytest.fixture
def small_server(
    settings_for: Callable[..., Settings], sqlite_url: str
) -> Iterator[tuple[str, Ledger]]:
    """Two API threads: a small pool, so that a cycle between threads and connections shows."""
    ledger = Ledger(settings_for(sqlite_url, api_threads=2))
    try:
        with serving(ledger) as url:
            yield url, ledger
    finally:
        ledger.stop()


async def _burst(url: str, paths: list[str], timeout: float) -> list[str]:
    limits = httpx.Limits(max_connections=len(paths))
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:

        async def one(path: str) -> str:
            try:
                r = await http.get(path)
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__} {path}"
            return "" if r.status_code == 200 else f"{r.status_code} {path}: {r.text[:200]}"

        return [e for e in await asyncio.gather(*(one(p) for p in paths)) if e]


def test_many_readers_never_hold_connections_waiting_for_a_thread(
    small_server: tuple[str, Ledger], nodes: list[NodeKey]
) -> None:
    """64 reads at once on 2 API threads. A sync route's response is validated in a worker
    thread after the route returned, while its session still holds a pooled connection: with
    more such sessions than the pool holds, the threads wait for the pool and the sessions for
    a thread (a freeze until the pool's 30 s timeout, then 500s). Sessions are now gated on the
    event loop so that their connections never outnumber the pool's share for them."""
    url, _ = small_server
    run = h("run-burst")
    paths = [
        p
        for _ in range(16)
        for p in (
            f"/v1/runs/{run}/rounds",
            f"/v1/nodes/{nodes[0].address}",
            f"/v1/runs/{run}/rounds?limit=3",
            f"/v1/nodes/{nodes[1].address}?limit=5",
        )
    ]
    t0 = time.monotonic()
    errors = asyncio.run(_burst(url, paths, timeout=10.0))
    assert errors == [], errors[:5]
    assert time.monotonic() - t0 < 10.0
