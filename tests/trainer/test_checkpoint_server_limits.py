"""A member's checkpoint server against a client that never reads (F10 of issue 25): real sockets.

The server runs in its own process (a real :class:`CheckpointServer` with a 6 MiB blob in 1 MiB
chunks). The attacker is a plain TCP client from another loopback address (127.0.0.2, so a
per-client limit can tell it from the honest joiner on 127.0.0.1): it opens many keep-alive
connections with a tiny receive window, pipelines chunk requests on each and never reads, so the
server's handler threads block in their writes while holding its request slots.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import pytest

from trainer.network.peer_checkpoint import Manifest, fetch

SIZE = 6 * (1 << 20)
CHUNK = 1 << 20
ROUND = 3
ATTACKER = "127.0.0.2"

_SERVER = textwrap.dedent(
    """
    import hashlib, json, sys
    from trainer.network.peer_checkpoint import CheckpointServer, Manifest
    size, chunk, limits = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    blob = hashlib.shake_256(b"big").digest(size)
    manifest, digests = Manifest.of(blob, bytes(32), chunk)
    server = CheckpointServer("127.0.0.1", 0, **limits)
    server.offer(3, blob, digests, manifest)
    print(server.endpoint, flush=True)
    sys.stdin.read()
    """
)


def _honest() -> tuple[bytes, Manifest]:
    import hashlib

    blob = hashlib.shake_256(b"big").digest(SIZE)
    return blob, Manifest.of(blob, bytes(32), CHUNK)[0]


Server = Callable[..., tuple[str, int]]


@pytest.fixture
def server_with() -> Iterator[Server]:
    """``server_with(**limits)``: (host, port) of a checkpoint server process."""
    procs: list[subprocess.Popen[str]] = []

    def start(**limits: float) -> tuple[str, int]:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(SIZE), str(CHUNK), json.dumps(limits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        host, _, port = proc.stdout.readline().strip().rpartition(":")
        return host, int(port)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture
def server(server_with: Server) -> tuple[str, int]:
    """A checkpoint server process with a 3 s write deadline."""
    return server_with(write_deadline_s=3.0)


def _hog(addr: tuple[str, int], requests: int) -> socket.socket:
    """A keep-alive connection from ATTACKER with a tiny receive window and ``requests``
    pipelined chunk requests that it never reads."""
    _, manifest = _honest()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.bind((ATTACKER, 0))
    s.connect(addr)
    root = manifest.chunks_root.hex()
    s.sendall(b"".join(f"GET /v1/ckpt/{ROUND}/{root}/chunk/{i % 6} HTTP/1.1\r\nHost: x\r\n\r\n"
                       .encode() for i in range(requests)))  # fmt: skip
    return s


@pytest.mark.parametrize("bound", ["per_client", "per_client_connections"])
def test_one_client_cannot_hold_every_slot_of_a_checkpoint_server(
    server_with: Server, bound: str
) -> None:
    """F10: 20 non-reading keep-alive connections with pipelined requests held all 16 request
    slots, and the honest joiner got 503 from every request. Per-client limits leave it room:
    each of the two (requests in service, open connections) is enough on its own."""
    server = server_with(write_deadline_s=30.0, **{bound: 64})  # the other bound alone
    hogs = [_hog(server, 8) for _ in range(20)]
    try:
        time.sleep(1.0)  # the server's handlers are now blocked writing to the attacker
        blob, manifest = _honest()
        started = time.monotonic()
        got, faults = fetch(ROUND, manifest, [f"{server[0]}:{server[1]}"], deadline_s=20)
        took = time.monotonic() - started
    finally:
        for h in hogs:
            h.close()
    assert got == blob and faults == []
    print(f"honest fetch of {SIZE >> 20} MiB beside 20 hogging connections: {took:.2f}s")


def test_a_client_that_does_not_read_is_cut_off_at_the_write_deadline(
    server: tuple[str, int],
) -> None:
    """F10: a response blocked on a reader that never reads held its slot until the socket
    timeout (30 s a write, again for every pipelined request); the server now closes the
    connection once a response has not gone out within its write deadline (3 s here)."""
    hog = _hog(server, 4)
    time.sleep(3.0 + 2.0)  # read nothing past the write deadline
    received, ended = 0, False
    hog.settimeout(2.0)
    try:
        while data := hog.recv(1 << 20):
            received += len(data)
        ended = True
    except TimeoutError:
        pass  # the server still waits on this connection: it was never cut off
    except OSError:
        ended = True  # reset by the server
    finally:
        hog.close()
    assert ended and received < 4 * CHUNK, (
        f"the server wrote {received} bytes and kept the connection: no write deadline"
    )
    print(f"non-reading client cut off after {received} of {4 * CHUNK} bytes")


def test_one_client_cannot_open_unbounded_connections(server: tuple[str, int]) -> None:
    """F10: every connection is a server thread; beyond ``per_client_connections`` (8) open
    ones from one address the server closes a new connection at once."""
    conns = []
    for _ in range(12):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((ATTACKER, 0))
        s.connect(server)
        s.settimeout(1.0)
        conns.append(s)
    closed = 0
    for s in conns:
        try:
            closed += s.recv(1) == b""
        except TimeoutError:
            pass
        except OSError:
            closed += 1
        s.close()
    assert closed == 12 - 8, f"{closed} of 12 connections closed by the server"


def test_pipelined_requests_on_one_connection_are_capped(server: tuple[str, int]) -> None:
    """F10: one connection could queue any number of requests; the server answers at most
    ``max_requests_per_connection`` (64) on it, the last with ``Connection: close``."""
    _, manifest = _honest()
    root = manifest.chunks_root.hex()
    s = socket.create_connection(server, timeout=10)
    s.sendall(b"".join(f"GET /v1/ckpt/{ROUND}/{root}/digests HTTP/1.1\r\nHost: x\r\n\r\n"
                       .encode() for _ in range(200)))  # fmt: skip
    data = b""
    try:
        while chunk := s.recv(1 << 16):
            data += chunk
    except TimeoutError:
        pass
    finally:
        s.close()
    answered = data.count(b"HTTP/1.1 200")
    assert answered == 64, f"{answered} of 200 pipelined requests answered on one connection"
