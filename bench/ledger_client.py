"""The bench's load generator: raw HTTP/1.1 keep-alive over asyncio, run in its own process.

A minimal client (pre-encoded requests, Content-Length framing) so that the client, not the
ledger, is never the bottleneck on a small machine. Closed loop for throughput, open loop
(fixed schedule, latency measured from the scheduled send time) for p50/p99.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import Any


def _head(path: str, host: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, path: str, host: str, body: bytes) -> tuple[int, bytes]:
        self.writer.write(_head(path, host, len(body)) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"content-length:")
        length = int(lower[at + 15 : lower.find(b"\r\n", at)]) if at >= 0 else 0
        payload = await self.reader.readexactly(length) if length else b""
        return status, payload

    async def get(self, path: str, host: str) -> tuple[int, bytes]:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"content-length:")
        length = int(lower[at + 15 : lower.find(b"\r\n", at)]) if at >= 0 else 0
        payload = await self.reader.readexactly(length) if length else b""
        return status, payload


async def _connect(host: str, port: int) -> Conn:
    reader, writer = await asyncio.open_connection(host, port)
    return Conn(reader, writer)


async def closed_loop(
    host: str, port: int, path: str, bodies: list[bytes], concurrency: int
) -> dict[str, Any]:
    conns = [await _connect(host, port) for _ in range(concurrency)]
    next_index = 0
    bad: list[str] = []

    async def worker(conn: Conn) -> None:
        nonlocal next_index
        while next_index < len(bodies):
            i = next_index
            next_index += 1
            status, payload = await conn.post(path, host, bodies[i])
            batch_rejects = path.endswith("/batch") and b'"rejected":0' not in payload
            if status != 202 or batch_rejects:
                bad.append(f"{status} {payload[:200]!r}")

    start = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.writer.close()
    return {"elapsed_s": elapsed, "requests": len(bodies), "errors": len(bad), "sample": bad[:3]}


async def read_loop(host: str, port: int, path: str, count: int) -> dict[str, Any]:
    """``count`` GETs of ``path`` one after another on one connection: a read's own cost,
    nothing queued beside it."""
    conn = await _connect(host, port)
    bad: list[str] = []
    start = time.perf_counter()
    for _ in range(count):
        status, payload = await conn.get(path, host)
        if status != 200:
            bad.append(f"{status} {payload[:200]!r}")
    elapsed = time.perf_counter() - start
    conn.writer.close()
    return {"elapsed_s": elapsed, "requests": count, "errors": len(bad), "sample": bad[:3]}


async def open_loop(
    host: str, port: int, path: str, bodies: list[bytes], rate: float
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    idle: deque[Conn] = deque([await _connect(host, port) for _ in range(32)])
    latencies: list[float] = []
    bad: list[str] = []
    t0 = loop.time() + 0.05

    async def one(i: int, body: bytes) -> None:
        scheduled = t0 + i / rate
        conn = idle.popleft() if idle else await _connect(host, port)
        try:
            status, payload = await conn.post(path, host, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            # the server closed an idle keep-alive connection before reading: send again
            conn = await _connect(host, port)
            status, payload = await conn.post(path, host, body)
        latencies.append(loop.time() - scheduled)
        if status != 202:
            bad.append(f"{status} {payload[:200]!r}")
        idle.append(conn)

    tasks = []
    for i, body in enumerate(bodies):
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, body)))
    await asyncio.gather(*tasks)
    elapsed = loop.time() - t0
    latencies.sort()
    n = len(latencies)
    return {
        "p50_ms": latencies[n // 2] * 1000,
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000,
        "max_ms": latencies[-1] * 1000,
        "achieved_rps": n / elapsed,
        "requests": n,
        "errors": len(bad),
        "sample": bad[:3],
    }


async def mixed_loop(
    host: str,
    port: int,
    path: str,
    bodies: list[bytes],
    reads: list[str],
    *,
    concurrency: int,
    seconds: float,
    read_every: int = 3,
) -> dict[str, Any]:
    """``concurrency`` connections at once, each a closed loop for ``seconds``: every
    ``read_every``-th request a GET of one of ``reads``, the others POST ``bodies`` (re-posted
    when exhausted: an exact re-post answers 202 with the same id). Any answer other than
    200/202, or a dropped connection, is an error; the slowest request is ``max_ms``."""
    loop = asyncio.get_running_loop()
    conns = [await _connect(host, port) for _ in range(concurrency)]
    latencies: list[float] = []
    slowest = {"read": 0.0, "write": 0.0}  # which kind makes the tail
    bad: list[str] = []
    counts = {"reads": 0, "writes": 0}
    read_counts = dict.fromkeys(reads, 0)  # each kind of read gets its share
    stop = loop.time() + seconds
    next_body = 0

    async def worker(k: int, conn: Conn) -> None:
        nonlocal next_body
        n = k
        while loop.time() < stop:
            n += 1
            t = loop.time()
            kind = "read" if n % read_every == 0 else "write"
            try:
                if kind == "read":
                    # this connection's reads take ``reads`` in turn (rounds, a node, rewards)
                    read = reads[(n // read_every) % len(reads)]
                    status, payload = await conn.get(read, host)
                    counts["reads"] += 1
                    read_counts[read] += 1
                else:
                    body = bodies[next_body % len(bodies)]
                    next_body += 1
                    status, payload = await conn.post(path, host, body)
                    counts["writes"] += 1
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                bad.append(repr(exc))
                conn = await _connect(host, port)
                continue
            latencies.append(loop.time() - t)
            slowest[kind] = max(slowest[kind], latencies[-1])
            if status not in (200, 202):
                bad.append(f"{status} {payload[:200]!r}")

    start = loop.time()
    await asyncio.gather(*(worker(k, c) for k, c in enumerate(conns)))
    elapsed = loop.time() - start
    for c in conns:
        c.writer.close()
    latencies.sort()
    n = len(latencies)
    return {
        "connections": concurrency,
        "elapsed_s": elapsed,
        "requests": n,
        **counts,
        "reads_by_path": read_counts,
        "errors": len(bad),
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else None,
        "max_ms": latencies[-1] * 1000 if n else None,
        "read_max_ms": slowest["read"] * 1000,
        "write_max_ms": slowest["write"] * 1000,
        "sample": bad[:3],
    }


def run_phase(
    kind: str,
    host: str,
    port: int,
    path: str,
    bodies: list[bytes],
    *,
    arg: float,
    cpu: int | None,
    reads: list[str] | None = None,
    seconds: float = 0.0,
) -> dict[str, Any]:
    """Entry point in the client process (pinned to ``cpu`` when given)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    if kind == "mixed":
        coro = mixed_loop(
            host, port, path, bodies, reads or [], concurrency=int(arg), seconds=seconds
        )
        return dict(runner(coro))
    if kind == "reads":
        return dict(runner(read_loop(host, port, path, int(arg))))
    if kind == "closed":
        return dict(runner(closed_loop(host, port, path, bodies, int(arg))))
    return dict(runner(open_loop(host, port, path, bodies, arg)))
