"""A checkpoint fetch against peers that lie, hang or crash (F8 of issue 25): real HTTP peers.

Each bad peer is a separate Python process speaking HTTP/1.1 on a real socket by hand (no
:class:`CheckpointServer`), so it can do what an honest server never does: announce a
``Content-Length`` that is not a number, trickle its body one byte at a time (never idle long
enough for a socket timeout), or die half-way through a chunk. The honest peer is a real
:class:`~trainer.network.peer_checkpoint.CheckpointServer` process. The fetch must return the
honest blob, drop the bad peer after at most one chunk per connection, and end within its deadline
whatever the peers do.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from protocol.errors import CheckpointError
from tests.trainer.test_peer_checkpoint import CHUNK, ROUND, SIZE, Peers, _honest
from trainer.network.peer_checkpoint import fetch

_BAD_PEER = textwrap.dedent(
    """
    import hashlib, os, socket, sys, threading, time
    from trainer.network.peer_checkpoint import Manifest
    mode, size, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    blob = hashlib.shake_256(b"blob").digest(size)
    manifest, digests = Manifest.of(blob, bytes(32), chunk)
    srv = socket.create_server(("127.0.0.1", 0))
    print(f"127.0.0.1:{srv.getsockname()[1]}", flush=True)

    def body_of(path):
        if path.endswith("/digests"):
            return digests
        i = int(path.rsplit("/", 1)[1])
        return blob[i * chunk : (i + 1) * chunk]

    def serve(conn):
        f = conn.makefile("rb")
        while True:
            line = f.readline()
            if not line:
                return
            while f.readline() not in (b"\\r\\n", b""):
                pass
            body = body_of(line.split()[1].decode())
            length = "12abc" if mode == "badlen" else str(len(body))
            conn.sendall(f"HTTP/1.1 200 OK\\r\\nContent-Length: {length}\\r\\n\\r\\n".encode())
            if mode == "crash":
                conn.sendall(body[: len(body) // 2])
                os._exit(3)
            if mode == "trickle":
                for byte in body:
                    conn.sendall(bytes([byte]))
                    time.sleep(0.2)
            else:
                conn.sendall(body)

    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
    """
)


class BadPeer:
    def __init__(self, mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BAD_PEER, mode, str(SIZE), str(CHUNK)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.endpoint = self.proc.stdout.readline().strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def bad_peer() -> Iterator[Callable[[str], BadPeer]]:
    started: list[BadPeer] = []

    def make(mode: str) -> BadPeer:
        started.append(BadPeer(mode))
        return started[-1]

    yield make
    for p in started:
        p.close()


@pytest.fixture
def honest() -> Iterator[str]:
    group = Peers(["ok"])
    yield group.endpoints[0]
    group.close()


def _bounded(limit_s: float, call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()``'s result (or the exception it raised) and its duration; fails if it is still
    running after ``limit_s`` (a hung fetch)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:
            out.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert out, f"the fetch was still running after {limit_s:.0f}s: one bad peer hung it"
    return out[0], time.monotonic() - started


@pytest.mark.parametrize("first", [True, False], ids=["digests", "chunks"])
def test_a_peer_with_a_non_numeric_content_length_cannot_crash_or_hang_a_fetch(
    bad_peer: Callable[[str], BadPeer], honest: str, first: bool
) -> None:
    """F8: ``int(Content-Length)`` on a lying peer's header raised ValueError, which escaped
    ``fetch`` (from the digest list) or killed a worker with its chunk counted in flight, so the
    other workers waited for it for ever."""
    blob, manifest = _honest()
    liar = bad_peer("badlen").endpoint
    endpoints = [liar, honest] if first else [honest, liar]
    result, took = _bounded(20, lambda: fetch(ROUND, manifest, endpoints, per_peer=2))
    assert not isinstance(result, BaseException), result
    got, faults = result
    assert got == blob
    assert faults and {f.peer for f in faults} == {liar}
    assert all("Content-Length" in f.reason for f in faults), faults
    print(f"liar first={first}: fetched in {took:.2f}s, {len(faults)} fault(s)")


def test_a_peer_that_dies_mid_chunk_is_dropped_and_its_chunk_refetched(
    bad_peer: Callable[[str], BadPeer], honest: str
) -> None:
    """F8: a peer that crashes half-way through a chunk costs that chunk only."""
    blob, manifest = _honest()
    crasher = bad_peer("crash").endpoint
    result, _ = _bounded(20, lambda: fetch(ROUND, manifest, [honest, crasher], per_peer=2))
    assert not isinstance(result, BaseException), result
    got, faults = result
    assert got == blob and {f.peer for f in faults} <= {crasher}


def test_a_trickling_peer_cannot_hold_a_chunk_past_its_deadline(
    bad_peer: Callable[[str], BadPeer], honest: str
) -> None:
    """F8: a peer that sends one byte every 0.2 s never trips a 2 s socket timeout; it held its
    chunk (and the fetch) for CHUNK x 0.2 s = 14 min. Each chunk now has a deadline of its own:
    the trickler is dropped after at most one chunk per connection and the deadline."""
    blob, manifest = _honest()
    slow = bad_peer("trickle").endpoint
    result, took = _bounded(
        30, lambda: fetch(ROUND, manifest, [honest, slow], per_peer=2, timeout_s=2.0)
    )
    assert not isinstance(result, BaseException), result
    got, faults = result
    assert got == blob
    assert {f.peer for f in faults} == {slow} and len(faults) <= 2, faults
    assert all("deadline" in f.reason for f in faults), faults
    assert took < 2.0 + 5.0, f"{took:.1f}s: the trickler held the fetch past its chunk deadline"
    print(f"trickler dropped; fetch took {took:.2f}s with a 2 s chunk deadline")


def test_a_fetch_ends_at_its_overall_deadline_whatever_the_peers_do(
    bad_peer: Callable[[str], BadPeer],
) -> None:
    """F8: the recovery deadline was checked only between fetches; now ``fetch`` itself ends at
    ``deadline_s`` with an error naming what was missing, even while every peer trickles."""
    _, manifest = _honest()
    slow = [bad_peer("trickle").endpoint, bad_peer("trickle").endpoint]
    result, took = _bounded(
        30, lambda: fetch(ROUND, manifest, slow, per_peer=2, timeout_s=60.0, deadline_s=3.0)
    )
    assert isinstance(result, CheckpointError), result
    assert "3s" in result.message and "deadline" in result.message, result.message
    assert took < 3.0 + 3.0, f"{took:.1f}s past a 3 s deadline"
