"""Elastic membership at round boundaries, over a ``torch.distributed.TCPStore``.

The store is hosted by a coordinator (``coloco`` rendezvous, the demo, a test, or the first node
with ``host=True``); nodes connect as clients. For each round ``r`` (and each retry ``a`` of it
after a member died) nodes register their address under ``members/r/a``; any registrant closes
the list with ``compare_set`` once every expected node has registered and the join window has
passed, or once the timeout has passed with whoever is there. Expected = last round's members
minus those that announced leaving (round 1: ``min_nodes``). Ranks are positions in the sorted
address list, and each closed list gets a fresh gloo/NCCL process group (:class:`RoundGroup`).

The lowest rank of each round publishes the round's checkpoint blob under ``ckpt/r`` and
``ckpt/latest``: a node that joins fetches it from there (live recovery from a peer).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from protocol.errors import CheckpointError, CollectiveError, TrainerError
from trainer.comm import GroupAverager, SoloAverager

log = logging.getLogger(__name__)

_POLL_S = 0.05


@dataclass(frozen=True)
class MembershipConfig:
    min_nodes: int = 1
    join_window_s: float = 1.0
    rendezvous_timeout_s: float = 60.0
    collective_timeout_s: float = 30.0
    connect_timeout_s: float = 20.0
    backend: str = "auto"
    """"auto": NCCL when the node trains on CUDA, else gloo; or "gloo" / "nccl"."""


@dataclass(frozen=True)
class Members:
    round: int
    attempt: int
    addresses: tuple[str, ...]

    def rank_of(self, address: str) -> int:
        return self.addresses.index(address)


class DivergedError(CheckpointError):
    """This node's weights differ from those of a strict majority of the round's members."""


class RoundGroup:
    """The process group of one closed member list; torn down before the next is formed."""

    def __init__(self, members: Members, rank: int, averager: GroupAverager | SoloAverager) -> None:
        self.members = members
        self.rank = rank
        self.averager = averager

    @property
    def world_size(self) -> int:
        return len(self.members.addresses)

    def check_same(self, digest: bytes, timeout: timedelta) -> tuple[str, ...]:
        """Compare the resulting checkpoint hash across members; majority rules.

        Returns the members that diverge from a strict majority holding this node's
        ``digest`` (evicted: they recover from a peer, the run goes on). Raises
        CheckpointError when this node is outside a strict majority (it is the divergent one,
        or there is no majority, e.g. 1 against 1)."""
        self.divergent: tuple[str, ...] = ()
        if self.world_size == 1:
            return ()
        device = getattr(self.averager, "device", torch.device("cpu"))
        mine = torch.tensor(list(digest), dtype=torch.uint8, device=device)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        try:
            work = dist.all_gather(gathered, mine, async_op=True)
            if not work.wait(timeout):
                raise CollectiveError(f"hash check did not finish within {timeout}")
        except (RuntimeError, dist.DistBackendError) as exc:
            raise CollectiveError(f"hash check over {self.world_size} nodes failed: {exc}") from exc
        held = {a: bytes(g.cpu().tolist()) for a, g in zip(self.members.addresses, gathered,
                                                            strict=True)}  # fmt: skip
        agree = [a for a, h in held.items() if h == digest]
        others = tuple(a for a in self.members.addresses if held[a] != digest)
        if others and 2 * len(agree) <= self.world_size:
            addr = others[0]
            counts = Counter(held.values())
            majority = any(2 * n > self.world_size for n in counts.values())
            raise (DivergedError if majority else CheckpointError)(
                f"after round {self.members.round} node {addr} holds weights 0x"
                f"{held[addr].hex()[:16]}.. but this node 0x{digest.hex()[:16]}.. and this "
                f"node is not in a strict majority ({len(agree)} of {self.world_size}): the "
                "nodes diverged (different code, torch version or hardware?)"
            )
        if others:
            log.warning("round %d: %s diverged from the majority (%d of %d): evicted, they "
                        "recover from a peer", self.members.round, list(others), len(agree),
                        self.world_size)  # fmt: skip
        self.divergent = others
        return others

    @property
    def publisher(self) -> bool:
        """Whether this node publishes the round's checkpoint: the lowest-ranked member of the
        majority (rank 0 unless rank 0 diverged)."""
        honest = [a for a in self.members.addresses if a not in getattr(self, "divergent", ())]
        return bool(honest) and honest[0] == self.members.addresses[self.rank]

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class Rendezvous:
    """One node's handle on the shared store."""

    def __init__(
        self,
        host: str,
        port: int,
        address: str,
        cfg: MembershipConfig | None = None,
        *,
        is_host: bool = False,
    ) -> None:
        self.address = address
        self.cfg = cfg or MembershipConfig()
        try:
            self.store = dist.TCPStore(  # type: ignore[attr-defined]
                host,
                port,
                is_master=is_host,
                wait_for_workers=False,
                timeout=timedelta(seconds=self.cfg.connect_timeout_s),
            )
            self.store.set_timeout(timedelta(seconds=self.cfg.rendezvous_timeout_s))
        except (RuntimeError, dist.DistStoreError) as exc:
            raise CollectiveError(
                f"cannot reach the rendezvous at {host}:{port}: {exc}. Is the coordinator "
                "running? Check --rendezvous host:port and the firewall."
            ) from exc

    # --- membership -------------------------------------------------------------------------

    def _prefix(self, round: int, attempt: int) -> str:
        return f"members/{round}/{attempt}"

    def _registered(self, prefix: str) -> list[str]:
        n = int(self.store.add(f"{prefix}/n", 0))
        return [self.store.get(f"{prefix}/slot/{i}").decode() for i in range(n)]

    def _expected(self, round: int, attempt: int) -> set[str] | int:
        if attempt > 0:
            return set(json.loads(self.store.get(f"{self._prefix(round, attempt - 1)}/closed")))
        if self.store.check(["latest_members"]):
            last = json.loads(self.store.get("latest_members"))
            leaving = {a for a in last["members"] if self.store.check([f"leave/{round}/{a}"])}
            return set(last["members"]) - leaving
        return self.cfg.min_nodes

    def closed(self, round: int, attempt: int = 0) -> Members | None:
        key = f"{self._prefix(round, attempt)}/closed"
        if not self.store.check([key]):
            return None
        return Members(round, attempt, tuple(json.loads(self.store.get(key))))

    def join(
        self,
        round: int,
        attempt: int = 0,
        *,
        window_s: float | None = None,
        timeout_s: float | None = None,
    ) -> Members:
        """Register for ``round`` and wait until its member list is closed; return it."""
        prefix = self._prefix(round, attempt)
        slot = int(self.store.add(f"{prefix}/n", 1)) - 1
        self.store.set(f"{prefix}/slot/{slot}", self.address)
        window = self.cfg.join_window_s if window_s is None else window_s
        timeout = self.cfg.rendezvous_timeout_s if timeout_s is None else timeout_s
        start = time.monotonic()
        while True:
            members = self.closed(round, attempt)
            if members is not None:
                return members
            waited = time.monotonic() - start
            present = set(self._registered(prefix))
            expected = self._expected(round, attempt)
            complete = (
                len(present) >= expected if isinstance(expected, int) else expected <= present
            )
            if (complete and waited >= window) or waited >= timeout:
                if not complete:
                    log.warning("round %d: closing without %s", round,
                                sorted(expected - present) if isinstance(expected, set) else
                                f"{expected - len(present)} more nodes")  # fmt: skip
                self._try_close(prefix, round, sorted(present))
            time.sleep(_POLL_S)

    def _try_close(self, prefix: str, round: int, addresses: list[str]) -> None:
        value = json.dumps(addresses).encode()
        winner = self.store.compare_set(f"{prefix}/closed", "", value)  # type: ignore[arg-type]
        if winner == value:
            self.store.set("latest_members", json.dumps({"round": round, "members": addresses}))
            self.store.set("current_round", str(round))
            log.info("round %d members closed: %s", round, addresses)

    def announce_leave(self, next_round: int) -> None:
        """Tell the others not to wait for this node in ``next_round``."""
        self.store.set(f"leave/{next_round}/{self.address}", "1")

    def current_round(self) -> int:
        """The latest round whose member list closed (0 if none)."""
        if not self.store.check(["current_round"]):
            return 0
        return int(self.store.get("current_round"))

    # --- process group ----------------------------------------------------------------------

    def form_group(self, members: Members, device: torch.device) -> RoundGroup:
        """A fresh process group over ``members`` (this node must be one of them)."""
        if self.address not in members.addresses:
            raise TrainerError(f"{self.address} is not a member of round {members.round}")
        rank = members.rank_of(self.address)
        timeout = timedelta(seconds=self.cfg.collective_timeout_s)
        if len(members.addresses) == 1:
            return RoundGroup(members, 0, SoloAverager())
        if dist.is_initialized():
            dist.destroy_process_group()
        backend = self.cfg.backend
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        prefix = f"pg/{members.round}/{members.attempt}"
        try:
            dist.init_process_group(
                backend,
                store=dist.PrefixStore(prefix, self.store),  # type: ignore[attr-defined]
                rank=rank,
                world_size=len(members.addresses),
                timeout=timeout,
            )
        except (RuntimeError, dist.DistBackendError, dist.DistStoreError) as exc:
            raise CollectiveError(
                f"forming the process group of round {members.round} failed: {exc}"
            ) from exc
        wire_device = device if backend == "nccl" else torch.device("cpu")
        return RoundGroup(members, rank, GroupAverager(None, timeout, wire_device))

    # --- live recovery ----------------------------------------------------------------------

    def publish_checkpoint(self, round: int, blob: bytes, weights_hash: bytes) -> None:
        self.store.set(f"ckpt/{round}", blob)  # type: ignore[arg-type]
        self.store.set("ckpt/latest", json.dumps({"round": round, "hash": weights_hash.hex()}))
        if round >= 2 and self.store.check([f"ckpt/{round - 2}"]):
            self.store.delete_key(f"ckpt/{round - 2}")

    def latest_checkpoint_round(self) -> tuple[int, bytes] | None:
        if not self.store.check(["ckpt/latest"]):
            return None
        info = json.loads(self.store.get("ckpt/latest"))
        return int(info["round"]), bytes.fromhex(info["hash"])

    def fetch_checkpoint(self, round: int, timeout_s: float) -> bytes:
        """The checkpoint blob of ``round`` from a peer, waiting up to ``timeout_s`` for it."""
        key = f"ckpt/{round}"
        try:
            self.store.wait([key], timedelta(seconds=timeout_s))
        except (RuntimeError, dist.DistStoreError) as exc:
            raise CheckpointError(
                f"no peer published the checkpoint of round {round} within {timeout_s:.0f}s: {exc}"
            ) from exc
        return bytes(self.store.get(key))
