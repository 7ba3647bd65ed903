"""Where a node's starting state comes from, and the checks it must pass.

Order at start-up: the newest of (a peer's published checkpoint, this node's checkpoint folder);
else the committed weights from the ledger's blob store; else the genesis weights of the run's
seed. Every checkpoint of round r is checked against ``ContributionLedger.checkpointOf(run, r)``
when a chain is configured and the round is committed (a round the ledger has not committed yet
is checked against the hash its publisher advertised, and the log says so).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from protocol.blobs import decode_blob, encode_blob
from protocol.errors import CheckpointError
from protocol.types import Bytes32, RoundNumber, RunId
from trainer.checkpoint import MAX_CHECKPOINT_BYTES, CheckpointDir, RoundCheckpoint
from trainer.ledger_client import LedgerClient
from trainer.membership import Rendezvous
from trainer.model import GPTConfig, genesis_state

log = logging.getLogger(__name__)

ZERO = bytes(32)


def genesis_checkpoint(cfg: GPTConfig, seed: int, run_id: bytes = ZERO) -> RoundCheckpoint:
    """Round 0: the seed's weights, zero momentum. Its hash is what the run commits as round 0."""
    weights = genesis_state(cfg, seed)
    return RoundCheckpoint(0, weights, {n: torch.zeros_like(t) for n, t in weights.items()}, run_id)


def genesis_hash(cfg: GPTConfig, seed: int) -> bytes:
    return genesis_checkpoint(cfg, seed).weights_hash


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
    ) -> None:
        self.run_id = run_id
        self.model = model
        self.seed = seed
        self.chain = chain
        self.ledger = ledger
        self.peer_timeout_s = peer_timeout_s

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

    def from_peer(self, rdv: Rendezvous, round: int) -> RoundCheckpoint:
        if round == 0:
            return self.verify(genesis_checkpoint(self.model, self.seed, self.run_id), "genesis")
        blob = rdv.fetch_checkpoint(round, self.peer_timeout_s)
        advertised = rdv.latest_checkpoint_round()
        expect = advertised[1] if advertised and advertised[0] == round else None
        ckpt = RoundCheckpoint.from_bytes(blob, expect_hash=expect)
        if ckpt.round != round:
            raise CheckpointError(f"peer sent the checkpoint of round {ckpt.round}, not {round}")
        return self.verify(ckpt, "a peer")

    def from_ledger(self, round: int) -> RoundCheckpoint | None:
        """Committed weights from the ledger's blob store (momentum restarts at zero)."""
        if self.ledger is None:
            return None
        expected = self.committed(round)
        if expected is None:
            return None
        data = self.ledger.get_blob(expected)
        if data is None:
            return None
        weights = decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES)
        ckpt = RoundCheckpoint(round, weights, {n: torch.zeros_like(t) for n, t in weights.items()},
                               self.run_id)  # fmt: skip
        log.warning(
            "recovered round %d weights from the ledger; outer momentum restarts at 0", round
        )
        return self.verify(ckpt, "the ledger")

    def initial(self, rdv: Rendezvous, disk: CheckpointDir | None) -> RoundCheckpoint:
        peer = rdv.latest_checkpoint_round()
        local = disk.latest() if disk is not None else None
        if peer is not None and (local is None or peer[0] > local.round):
            return self.from_peer(rdv, peer[0])
        if local is not None:
            return self.verify(local, f"{disk.path if disk else 'disk'}")
        if self.chain is not None:
            last = int(self.chain.last_round(RunId(self.run_id)))
            if last > 0:
                found = self.from_ledger(last)
                if found is not None:
                    return found
        genesis = self.verify(genesis_checkpoint(self.model, self.seed, self.run_id), "genesis")
        self.upload(genesis)  # round 1's base, so the ledger can score round 1 (idempotent)
        return genesis

    def upload(self, ckpt: RoundCheckpoint) -> None:
        """Rank 0 puts the round's weights in the ledger's blob store (id = checkpoint hash)."""
        if self.ledger is not None:
            self.ledger.put_blob(Bytes32(ckpt.weights_hash), encode_blob(ckpt.weights))
