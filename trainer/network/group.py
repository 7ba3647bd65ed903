"""The process group of one closed member list, and the members' verdict on the round's result.

Ranks are positions in the sorted address list (:class:`trainer.network.members.Members`); each
list gets a fresh gloo/NCCL process group (:func:`form_group`), rendezvoused under a prefix of the
round, the attempt and the store's endpoint so that no two lists ever share one. After the outer
step :meth:`RoundGroup.check_same` compares the members' weights hashes: a strict majority evicts
the divergent members (:class:`DivergedError` on their side), no majority is an error.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist

from protocol.errors import CheckpointError, CollectiveError, TrainerError
from trainer.network.comm import GroupAverager, SoloAverager
from trainer.network.coordination.heartbeat import wait_work
from trainer.network.coordination.store import FailoverStore, endpoint_text
from trainer.network.members import Members

log = logging.getLogger(__name__)


class DivergedError(CheckpointError):
    """This node's weights differ from those of a strict majority of the round's members."""


class RoundGroup:
    """The process group of one closed member list; torn down before the next is formed."""

    def __init__(self, members: Members, rank: int, averager: GroupAverager | SoloAverager) -> None:
        self.members = members
        self.rank = rank
        self.averager = averager
        self.divergent: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return len(self.members.addresses)

    def check_same(self, digest: bytes, timeout: timedelta) -> tuple[str, ...]:
        """Compare the resulting checkpoint hash across members; majority rules.

        Returns the members that diverge from a strict majority holding this node's
        ``digest`` (evicted: they recover from a peer, the run goes on). Raises
        CheckpointError when this node is outside a strict majority (it is the divergent one,
        or there is no majority, e.g. 1 against 1)."""
        self.divergent = ()
        if self.world_size == 1:
            return ()
        device = getattr(self.averager, "device", torch.device("cpu"))
        mine = torch.tensor(list(digest), dtype=torch.uint8, device=device)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        try:
            work = dist.all_gather(gathered, mine, async_op=True)
            wait_work(work, timeout)
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
        honest = [a for a in self.members.addresses if a not in self.divergent]
        return bool(honest) and honest[0] == self.members.addresses[self.rank]

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def form_group(
    store: FailoverStore,
    members: Members,
    address: str,
    device: torch.device,
    *,
    timeout_s: float,
    backend: str = "auto",
) -> RoundGroup:
    """A fresh process group over ``members`` for the node ``address`` (one of them), met
    through ``store``. ``backend`` "auto": NCCL when the node trains on CUDA, else gloo."""
    if address not in members.addresses:
        raise TrainerError(f"{address} is not a member of round {members.round}")
    rank = members.rank_of(address)
    timeout = timedelta(seconds=timeout_s)
    if len(members.addresses) == 1:
        return RoundGroup(members, 0, SoloAverager())
    if dist.is_initialized():
        dist.destroy_process_group()
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    prefix = (
        f"{store.namespace}pg/{members.round}/{members.attempt}/{endpoint_text(store.endpoint)}"
    )
    try:
        dist.init_process_group(
            backend,
            store=dist.PrefixStore(prefix, store.store),  # type: ignore[attr-defined]
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
