"""Where a node's starting state comes from, and the checks it must pass.

At start-up (:meth:`Recovery.initial`), after the stake and registration (:meth:`check_admitted`):
the newest of this node's checkpoint folder, a peer's published checkpoint and the state the
ledger committed (its weights and outer momentum blobs, for the chain's last committed round),
each checked against the chain's committed hash; else the genesis weights of the run's seed. A
``ckpt/latest`` hint no newer than what the chain committed is stale and ignored, offers from
endpoints that refuse a connection (members gone) and from this node's own earlier start are
left out, and when no peer serves the newest round the node takes the ledger's committed state
(a late joiner whose earlier members are all gone starts from it).

A checkpoint from peers is fetched peer to peer (chunked, every chunk hash-checked, from
several members at once: :mod:`trainer.network.peer_checkpoint`) and used only if its weights hash
is the one committed on chain (``ContributionLedger.checkpointOf(run, r)``) or, for a round not
committed yet, the one signed by a strict majority of that round's members (signed ``CHECKPOINT``
messages: :mod:`trainer.network.checkpoint_board`). A peer that serves a bad chunk is refused
(logged, kept in the board's refusals) and its chunk fetched from another member.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from typing import Any

import torch

from protocol.blobs import decode_blob, encode_blob
from protocol.errors import ChainError, CheckpointError, LedgerUnavailableError
from protocol.types import Address, Bytes32, RoundNumber, RunId
from reference.checkpoint import MAX_CHECKPOINT_BYTES, CheckpointDir, RoundCheckpoint
from reference.model import GPTConfig, genesis_state
from trainer.network.checkpoint_board import CheckpointBoard
from trainer.network.checkpoint_fetch import FetchError, PeerFault, fetch
from trainer.network.checkpoint_manifest import Manifest
from trainer.network.ledger_client import LedgerClient

log = logging.getLogger(__name__)

ZERO = bytes(32)
HEADER_ROOM = 1 << 20
"""Bytes allowed for a checkpoint blob's header and metadata beside its tensors."""
ROUND_WINDOW = 3
"""Rounds past the chain's last committed one that a run may be in (the ledger's default
``round_window``, 3 for the overlap schedule: round r is attested at the end of round r+1, and
round r+2 starts before it is committed): a ``ckpt/latest`` further ahead is refused."""
START_PEER_TIMEOUT_S = 20.0
"""At start-up, how long peers may take to serve a round the ledger also holds an older state for
(after that the node starts from the ledger's and catches up at its first round)."""


def genesis_checkpoint(cfg: GPTConfig, seed: int, run_id: bytes = ZERO) -> RoundCheckpoint:
    """Round 0: the seed's weights, zero momentum. Its hash is what the run commits as round 0."""
    weights = genesis_state(cfg, seed)
    return RoundCheckpoint(0, weights, {n: torch.zeros_like(t) for n, t in weights.items()}, run_id)


def genesis_hash(cfg: GPTConfig, seed: int) -> bytes:
    return genesis_checkpoint(cfg, seed).weights_hash


@dataclass(frozen=True)
class LedgerOuter:
    """The blob hashes of the weights and outer momentum the ledger committed for a round."""

    checkpoint: bytes
    momentum: bytes | None


class Recovery:
    """Finds, fetches and verifies checkpoints for one node."""

    def __init__(
        self,
        run_id: bytes,
        model: GPTConfig,
        seed: int,
        *,
        chain: Any | None = None,
        ledger: LedgerClient | None = None,
        peer_timeout_s: float = 120.0,
        chunk_timeout_s: float = 30.0,
        round_window: int = ROUND_WINDOW,
    ) -> None:
        self.run_id = run_id
        self.model = model
        self.seed = seed
        self.chain = chain
        self.ledger = ledger
        self.peer_timeout_s = peer_timeout_s
        self.chunk_timeout_s = chunk_timeout_s
        self.round_window = round_window
        self._bad_peers: set[tuple[int, str]] = set()
        self.skip: set[str] = set()
        """Addresses whose offers are never fetched from (this node's own earlier start)."""
        self._max_blob: int | None = None

    @property
    def max_blob_bytes(self) -> int:
        """The largest checkpoint blob of this run's model: its weights and outer momentum, plus
        room for the header. A signed offer claiming more is refused before anything is
        allocated or fetched (a member could claim 8 GiB for a model of a few MB)."""
        if self._max_blob is None:
            weights = genesis_state(self.model, self.seed)
            tensors = sum(t.numel() * t.element_size() for t in weights.values())
            self._max_blob = 2 * tensors + HEADER_ROOM
        return self._max_blob

    def committed(self, round: int) -> bytes | None:
        """The on-chain checkpoint hash of ``round``, or None (no chain, or not committed yet)."""
        if self.chain is None:
            return None
        if round > int(self.chain.last_round(RunId(self.run_id))) or (
            round == 0 and not self.chain.has_committed(RunId(self.run_id))
        ):
            return None
        value = bytes(self.chain.checkpoint_of(RunId(self.run_id), RoundNumber(round)))
        return None if value == ZERO else value

    def verify(self, ckpt: RoundCheckpoint, source: str) -> RoundCheckpoint:
        expected = self.committed(ckpt.round)
        actual = ckpt.weights_hash
        if expected is None:
            log.info("checkpoint of round %d from %s: not committed on chain yet, hash 0x%s..",
                     ckpt.round, source, actual.hex()[:12])  # fmt: skip
        elif expected != actual:
            raise CheckpointError(
                f"checkpoint of round {ckpt.round} from {source} hashes to 0x{actual.hex()}, but "
                f"the chain committed 0x{expected.hex()}: refusing it (wrong run, corrupt, or a "
                "dishonest peer); delete the local checkpoint or fetch from another source"
            )
        return ckpt

    def expected_hash(self, board: CheckpointBoard, round: int) -> tuple[bytes, str] | None:
        """The hash a checkpoint of ``round`` must have, and who vouches for it."""
        committed = self.committed(round)
        if committed is not None:
            return committed, "the chain"
        signed = board.signed_hash(round)
        return None if signed is None else (signed, "a majority of the round's members")

    def from_peer(
        self, board: CheckpointBoard, round: int, *, timeout_s: float | None = None
    ) -> RoundCheckpoint:
        """The verified checkpoint of ``round``, fetched peer to peer from the members serving it.

        The members' signed offers are grouped by manifest, most signers first, among those whose
        weights hash is the vouched-for one; each group's servers are fetched from in parallel,
        chunk by chunk (:func:`trainer.network.peer_checkpoint.fetch`), and the whole blob checked
        again."""
        if round == 0:
            return self.verify(genesis_checkpoint(self.model, self.seed, self.run_id), "genesis")
        timeout = self.peer_timeout_s if timeout_s is None else min(timeout_s, self.peer_timeout_s)
        deadline = time.monotonic() + timeout
        while True:
            expected = self.expected_hash(board, round)
            if expected is not None:
                for manifest, offered in self._offers(board, round, expected[0]):
                    peers = self._live(board, round, offered)
                    found = None
                    if peers:
                        found = self._try_fetch(board, round, manifest, peers, expected,
                                                deadline=deadline)  # fmt: skip
                    if found is not None:
                        return found
            if time.monotonic() > deadline:
                raise CheckpointError(
                    f"no copy of round {round}'s checkpoint matching a hash committed on chain or "
                    f"signed by a majority of its members within {timeout:.0f}s "
                    f"(hash known: {expected is not None}), and the chain has not committed it: "
                    "retry when its members are back, or once the ledger committed it"
                )
            time.sleep(0.2)

    def _offers(
        self, board: CheckpointBoard, round: int, expected: bytes
    ) -> list[tuple[Manifest, dict[str, str]]]:
        """(manifest, {address: endpoint}) per distinct manifest of ``expected``, most signed
        first; peers that served this node a bad chunk of this round are left out."""
        groups: dict[Manifest, dict[str, str]] = {}
        for addr, body in board.offers(round):
            if (round, addr) in self._bad_peers or addr in self.skip:
                continue
            serve = board.endpoint_of(round, addr, body)
            if serve is None:
                continue
            try:
                manifest = Manifest.from_body(body, max_size=self.max_blob_bytes)
            except CheckpointError as exc:
                board.refuse("invalid", f"ckpt/{round}/sig/{addr}", exc.message)
                continue
            if manifest.weights_hash == expected:
                groups.setdefault(manifest, {})[addr] = serve
        return sorted(groups.items(), key=lambda kv: -len(kv[1]))

    def _live(self, board: CheckpointBoard, round: int, peers: dict[str, str]) -> dict[str, str]:
        """``peers`` less those whose endpoint refuses connections (members gone, or a port now
        someone else's): never fetched from for this round (a ``dead_endpoint`` refusal)."""
        live = {}
        for addr, serve in peers.items():
            if _listening(serve):
                live[addr] = serve
                continue
            self._bad_peers.add((round, addr))
            board.refuse("dead_endpoint", f"ckpt/{round}/sig/{addr}",
                         f"{serve} refuses connections: not fetching from it")  # fmt: skip
        return live

    def _try_fetch(
        self,
        board: CheckpointBoard,
        round: int,
        manifest: Manifest,
        peers: dict[str, str],
        vouched: tuple[bytes, str],
        *,
        deadline: float,
    ) -> RoundCheckpoint | None:
        expected, by = vouched
        by_endpoint = {e: a for a, e in peers.items()}
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:  # the fetch itself ends at the recovery's deadline, whatever the peers do
            blob, faults = fetch(round, manifest, list(by_endpoint),
                                 timeout_s=self.chunk_timeout_s, deadline_s=left)  # fmt: skip
        except FetchError as exc:
            log.warning("round %d checkpoint fetch failed: %s", round, exc.message)
            self._refuse_peers(board, round, by_endpoint, exc.faults)
            return None
        self._refuse_peers(board, round, by_endpoint, faults)
        try:
            ckpt = RoundCheckpoint.from_bytes(blob, expect_hash=expected)
            if ckpt.round != round:
                raise CheckpointError(f"blob holds round {ckpt.round}, not {round}")
        except CheckpointError as exc:
            # every chunk matched a manifest its signers vouched for, yet the whole does not hash
            # to the vouched-for weights: those signers lied together; never use them again
            self._bad_peers.update((round, a) for a in peers)
            board.refuse("hash_mismatch", f"ckpt/{round}/{sorted(peers)}",
                             f"{exc.message} (hash vouched for by {by})")  # fmt: skip
            return None
        log.info("checkpoint of round %d from %d peers (%d dropped) matches the hash vouched for "
                 "by %s", round, len(peers), len(faults), by)  # fmt: skip
        return self.verify(ckpt, f"peers {sorted(peers)}")

    def _refuse_peers(
        self,
        board: CheckpointBoard,
        round: int,
        by_endpoint: dict[str, str],
        faults: list[PeerFault],
    ) -> None:
        for fault in faults:
            addr = by_endpoint.get(fault.peer, fault.peer)
            self._bad_peers.add((round, addr))
            board.refuse("hash_mismatch" if "digest" in fault.reason else "peer_fault",
                             f"ckpt/{round}/{addr}#chunk{fault.chunk}",
                             f"{fault.reason}; fetching from another member")  # fmt: skip

    def from_ledger(self, round: int) -> RoundCheckpoint | None:
        """The state the ledger committed after ``round`` (weights and outer momentum, each
        checked); else the committed weights from its blob store (momentum restarts at zero);
        None when the ledger lacks them or does not answer."""
        if self.ledger is None:
            return None
        expected = self.committed(round)
        if expected is None:
            return None
        outer = self.ledger_outer(round)
        if outer is not None and outer.checkpoint == expected:
            found = self.resync(round, outer)
            if found is not None:
                log.info("recovered round %d's state from the ledger", round)
                return found
        try:
            data = self.ledger.get_blob(expected)
        except LedgerUnavailableError as exc:
            log.warning("round %d: the ledger is unreachable (%s)", round, exc.message)
            return None
        if data is None:
            return None
        weights = decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES)
        ckpt = RoundCheckpoint(round, weights, {n: torch.zeros_like(t) for n, t in weights.items()},
                               self.run_id)  # fmt: skip
        log.warning(
            "recovered round %d weights from the ledger; outer momentum restarts at 0", round
        )
        return self.verify(ckpt, "the ledger")

    def ledger_outer(self, round: int) -> LedgerOuter | None:
        """The state the ledger committed for ``round`` (None: no ledger, unreachable, or not
        judged yet)."""
        if self.ledger is None:
            return None
        try:
            outer = self.ledger.outer(self.run_id, round)
        except LedgerUnavailableError:
            return None
        if outer is None or not outer.get("checkpoint"):
            return None
        mom = outer.get("momentum")
        return LedgerOuter(
            bytes.fromhex(str(outer["checkpoint"])[2:]),
            bytes.fromhex(str(mom)[2:]) if mom else None,
        )

    def resync(self, round: int, outer: LedgerOuter) -> RoundCheckpoint | None:
        """The ledger's committed state after ``round`` (``outer``, from :meth:`ledger_outer`):
        its weights and the outer momentum it computed (both blobs, checked against their hashes
        and the chain's commitment), or None when the ledger lacks a blob."""
        if self.ledger is None:
            return None
        try:
            data = self.ledger.get_blob(outer.checkpoint)
            mom_data = self.ledger.get_blob(outer.momentum) if outer.momentum else None
        except LedgerUnavailableError as exc:
            log.warning("round %d: ledger unreachable for a resync (%s)", round, exc.message)
            return None
        if data is None:
            return None
        weights = decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES)
        momentum = (
            decode_blob(mom_data, max_bytes=MAX_CHECKPOINT_BYTES)
            if mom_data is not None
            else {n: torch.zeros_like(t) for n, t in weights.items()}
        )
        ckpt = RoundCheckpoint(round, weights, momentum, self.run_id)
        if ckpt.weights_hash != outer.checkpoint:
            raise CheckpointError(
                f"the ledger's round {round} weights hash to 0x{ckpt.weights_hash.hex()}, not the "
                f"0x{outer.checkpoint.hex()} it committed: refusing them"
            )
        return self.verify(ckpt, "the ledger")

    def check_admitted(self, node: str) -> None:
        """With a chain: ``node`` is registered and staked, else a ChainError saying what to do
        (checked before anything is fetched: peers and the ledger refuse an unadmitted node, which
        would otherwise wait for them)."""
        if self.chain is None:
            return
        address = Address(node)
        if str(self.chain.node_info(address).operator) == "0x" + "0" * 40:
            raise ChainError(
                f"node {node} is not registered: its operator runs `coloco node register "
                f"--node {node} --payout 0x...` (then `coloco node stake --node {node}`)",
                code="not_registered",
            )
        if not self.chain.is_active(address):
            minimum = int(self.chain.training_config.min_stake())
            raise ChainError(
                f"node {node} is registered but not staked enough to train (minimum {minimum} "
                f"wei): its operator runs `coloco node stake --node {node}`",
                code="not_staked",
            )

    def last_committed(self) -> int:
        """The chain's last committed round (0 without a chain or a commitment)."""
        return 0 if self.chain is None else int(self.chain.last_round(RunId(self.run_id)))

    def initial(
        self, board: CheckpointBoard, disk: CheckpointDir | None, *, self_address: str = ""
    ) -> RoundCheckpoint:
        """The newest verified state: this node's folder, a peer's copy, the ledger's committed
        state (module docstring); genesis when there is none."""
        if self_address:
            self.skip.add(self_address)  # its own earlier start's offers point at a dead port
        local = self._local(disk)
        have = local.round if local is not None else 0
        committed = self.last_committed()
        peer = self._latest(board)
        if peer is not None and peer <= have:
            log.info("ckpt/latest names round %d, no newer than this node's own %d: not fetching "
                     "it", peer, have)  # fmt: skip
            peer = None
        if peer is not None and peer > committed:
            try:
                return self.from_peer(board, peer, timeout_s=START_PEER_TIMEOUT_S)
            except CheckpointError as exc:
                log.warning("round %d from peers: %s; taking the newest committed state instead",
                            peer, exc.message)  # fmt: skip
        if committed > have:
            found = self.from_ledger(committed)
            if found is not None:
                return found
        if peer is not None and peer <= committed:  # the ledger lacks it: peers may serve it
            return self.from_peer(board, peer)
        if local is not None:
            return local
        genesis = self.verify(genesis_checkpoint(self.model, self.seed, self.run_id), "genesis")
        self.upload(genesis)  # round 1's base, so the ledger can score round 1 (idempotent)
        return genesis

    def catch_up(self, board: CheckpointBoard, round: int) -> RoundCheckpoint:
        """Round ``round``'s state for a node that joined after it: from its members, else (none
        serves it) the ledger's committed state once the chain has it."""
        try:
            return self.from_peer(board, round)
        except CheckpointError as exc:
            found = self.from_ledger(round) if self.committed(round) is not None else None
            if found is None:
                raise
            log.warning("round %d from peers: %s; took the ledger's", round, exc.message)
            return found

    def _local(self, disk: CheckpointDir | None) -> RoundCheckpoint | None:
        """This node's newest checkpoint on disk, if it passes the chain's check."""
        if disk is None:
            return None
        try:
            local = disk.latest()
            return None if local is None else self.verify(local, str(disk.path))
        except CheckpointError as exc:
            log.warning("not resuming from %s: %s", disk.path, exc.message)
            return None

    def _latest(self, board: CheckpointBoard) -> int | None:
        """The round of ``ckpt/latest`` if a member of that round signed it and, with a chain,
        it is at most ``round_window`` past the last committed round; else None (the node then
        starts from its disk or the chain's latest committed round)."""
        peer = board.latest_round()
        if peer is None or self.chain is None:
            return peer
        last = int(self.chain.last_round(RunId(self.run_id)))
        if peer > last + self.round_window:
            board.refuse("future_round", "ckpt/latest", f"round {peer} is more than "
                         f"{self.round_window} past the chain's last committed round {last}: "
                         "starting from the chain's latest instead")  # fmt: skip
            return None
        return peer

    def upload(self, ckpt: RoundCheckpoint) -> None:
        """Rank 0 puts the round's weights in the ledger's blob store (id = checkpoint hash)."""
        if self.ledger is not None:
            self.ledger.put_blob(Bytes32(ckpt.weights_hash), encode_blob(ckpt.weights))


def _listening(endpoint: str, timeout_s: float = 2.0) -> bool:
    """Whether something accepts connections at ``endpoint`` (HOST:PORT, or a URL)."""
    hostport = endpoint.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout_s):
            return True
    except (OSError, ValueError):
        return False
