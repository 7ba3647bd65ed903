"""The namespace harness: a node's link is rate-limited and its counters see what it sends."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.harness.netns import Netns, unavailable

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}")

PAYLOAD = 1_500_000
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5555)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
print(n, flush=True)
"""
CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5555)); t = time.monotonic()
c.sendall(b"x" * int(sys.argv[2])); c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
print(time.monotonic() - t)
"""


def test_nodes_talk_through_a_rate_limited_link_and_counters_see_every_byte() -> None:
    net = Netns(2, rate_mbit=10, prefix=f"clt{os.getpid()}")
    with net:
        assert "tbf" in net.qdisc(0) and "10Mbit" in net.qdisc(0)
        before = net.counters(0)
        server = subprocess.Popen(
            [*net.argv(1), sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            t0 = time.monotonic()
            subprocess.run(
                [*net.argv(0), sys.executable, "-c", CLIENT, net.ip_of(1), str(PAYLOAD)],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            elapsed = time.monotonic() - t0
            assert int(server.stdout.readline()) == PAYLOAD
        finally:
            server.kill()
            server.wait()
        sent = net.counters(0).tx_bytes - before.tx_bytes
        # the payload plus TCP/IP/Ethernet headers (~4% at 1500-byte frames), nothing invented
        assert PAYLOAD <= sent <= PAYLOAD * 1.08
        assert net.counters(1).rx_bytes >= PAYLOAD
        # 1.5 MB at 10 Mbit/s takes >= 1.2 s: the limit is applied (a lower bound only)
        assert elapsed >= 0.9 * PAYLOAD * 8 / 10e6
        assert net.exists() == [net.hub, *net.nodes]
    assert net.exists() == []


def test_close_is_idempotent_and_removes_a_half_built_topology() -> None:
    net = Netns(1, prefix=f"clh{os.getpid()}")
    net.start()
    net.close()
    net.close()
    assert net.exists() == []
