"""Hosts for real: each node in its own Linux network namespace, behind a rate-limited link.

Topology (``Netns(n).start()``)::

    node ns "<p>n0"  eth0 10.77.0.1 ─veth─ l0 ┐
    node ns "<p>n1"  eth0 10.77.0.2 ─veth─ l1 ┼ br0 10.77.0.254   hub ns "<p>hub"
    ...                                       ┘  (rendezvous store, ledger: the "internet")

Every link gets ``tc qdisc ... tbf rate R burst 32kbit latency 400ms`` on both ends (the node's
upload on its eth0, its download on the hub's side), so a node is a host behind an R Mbit/s line.
Nothing else is on a node's eth0: its interface counters (``ip -s link``) are every byte it sends
and receives (all-reduce, checkpoints, rendezvous, ledger uploads), headers included.

Run a command inside node ``i`` with ``argv(i) + [...]`` (``ip netns exec``). Creation needs
CAP_NET_ADMIN (root) and the veth, bridge and tbf kernel modules: :func:`unavailable` says why
not where they are missing, so tests and benchmarks skip with that reason. :meth:`Netns.close`
deletes every namespace (and with them every veth and qdisc); it is idempotent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from types import TracebackType

SUBNET = "10.77.0"
HUB_IP = f"{SUBNET}.254"


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` failed: {out.stderr.strip()}")
    return out


def unavailable() -> str | None:
    """None when this machine can build the topology, else the reason it cannot."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "the `ip` and `tc` commands (iproute2) are not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); run as root or in a privileged VM"
    probe = Netns(1, rate_mbit=100, prefix=f"clprobe{os.getpid()}")
    try:
        probe.start()
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return f"the kernel refused the namespace/veth/bridge/tbf set-up: {exc}"
    finally:
        probe.close()
    return None


@dataclass(frozen=True)
class LinkCounters:
    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int


class Netns:
    """``n`` node namespaces and a hub namespace joined by a bridge, each link at ``rate_mbit``."""

    def __init__(self, n: int, rate_mbit: float = 100.0, *, prefix: str | None = None) -> None:
        if not 1 <= n <= 200:
            raise NetnsError(f"between 1 and 200 nodes, got {n}")
        self.n = n
        self.rate_mbit = rate_mbit
        self.prefix = prefix or f"cl{os.getpid()}"
        self.hub = f"{self.prefix}hub"
        self.nodes = [f"{self.prefix}n{i}" for i in range(n)]
        self._created: list[str] = []

    def ip_of(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    @property
    def hub_ip(self) -> str:
        return HUB_IP

    def argv(self, i: int | None) -> list[str]:
        """Prefix that runs a command in node ``i`` (None: the hub)."""
        return ["ip", "netns", "exec", self.hub if i is None else self.nodes[i]]

    def _tbf(self, ns: str, dev: str, rate_mbit: float) -> None:
        _ip("netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
            "rate", f"{rate_mbit:g}mbit", "burst", "32kbit", "latency", "400ms")  # fmt: skip

    def start(self) -> Netns:
        _ip("netns", "add", self.hub)
        self._created.append(self.hub)
        _ip("-n", self.hub, "link", "set", "lo", "up")
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "addr", "add", f"{HUB_IP}/24", "dev", "br0")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.nodes):
            _ip("netns", "add", ns)
            self._created.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "add", "name", "eth0", "netns", ns, "type", "veth",
                "peer", "name", f"l{i}", "netns", self.hub)  # fmt: skip
            _ip("-n", self.hub, "link", "set", f"l{i}", "master", "br0")
            _ip("-n", self.hub, "link", "set", f"l{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self.ip_of(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self.set_rate(i, self.rate_mbit)
        return self

    def set_rate(self, i: int, rate_mbit: float) -> None:
        """Both directions of node ``i``'s link at ``rate_mbit``."""
        self._tbf(self.nodes[i], "eth0", rate_mbit)
        self._tbf(self.hub, f"l{i}", rate_mbit)

    def counters(self, i: int) -> LinkCounters:
        """Node ``i``'s eth0 counters (what it sent and received, L2 headers included)."""
        out = _ip("-n", self.nodes[i], "-s", "-j", "link", "show", "dev", "eth0")
        stats = json.loads(out.stdout)[0]["stats64"]
        return LinkCounters(
            stats["tx"]["bytes"], stats["rx"]["bytes"], stats["tx"]["packets"],
            stats["rx"]["packets"],
        )  # fmt: skip

    def qdisc(self, i: int) -> str:
        return _ip("netns", "exec", self.nodes[i], "tc", "qdisc", "show", "dev", "eth0").stdout

    def close(self) -> None:
        for ns in reversed(self._created):
            _ip("netns", "del", ns, check=False)
        self._created.clear()

    def __enter__(self) -> Netns:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def exists(self) -> list[str]:
        listed = _ip("netns", "list").stdout.split()
        return [ns for ns in [self.hub, *self.nodes] if ns in listed]
