"""The bench's mixed phase reads what it says: a run's rounds, a node and a payout's rewards in
turn (it once read only the first of them), against a real HTTP server on a free port."""

from __future__ import annotations

import asyncio
from collections import Counter

from bench.ledger_client import mixed_loop, read_loop

READS = ["/v1/runs/r/rounds?limit=5", "/v1/nodes/n?limit=20", "/v1/rewards/p?limit=20"]


async def _serve_and_load(reads_alone: int = 0) -> tuple[dict[str, object], Counter[str]]:
    seen: Counter[str] = Counter()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path = head.split(b" ", 2)[:2]
                lower = head.lower()
                at = lower.find(b"content-length:")
                if at >= 0:
                    await reader.readexactly(int(lower[at + 15 : lower.find(b"\r\n", at)]))
                status = b"200 OK" if method == b"GET" else b"202 Accepted"
                if method == b"GET":
                    seen[path.decode()] += 1
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\n{}")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        if reads_alone:
            out = await read_loop("127.0.0.1", port, READS[1], reads_alone)
        else:
            out = await mixed_loop(
                "127.0.0.1", port, "/v1/attestations", [b"{}"], READS, concurrency=6, seconds=1.0
            )
    return out, seen


def test_mixed_phase_reads_rounds_nodes_and_rewards() -> None:
    out, seen = asyncio.run(_serve_and_load())
    assert out["errors"] == 0
    reads = out["reads"]
    assert isinstance(reads, int) and reads >= 6  # two turns at least, however loaded
    assert sum(seen.values()) == reads
    assert out["reads_by_path"] == {path: seen[path] for path in READS}
    for path in READS:  # each kind of read gets about a third of them
        assert seen[path] >= reads // 5, (path, dict(seen))


def test_reads_phase_sends_each_read_alone() -> None:
    """The reads phase (read_cpu_ms): one connection, the given count of one read, nothing else."""
    out, seen = asyncio.run(_serve_and_load(reads_alone=25))
    assert out["errors"] == 0 and out["requests"] == 25
    assert dict(seen) == {READS[1]: 25}
