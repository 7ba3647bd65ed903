"""Where a node's starting state comes from, and the checks it must pass.

Order at start-up: the newest of (a peer's published checkpoint, this node's checkpoint folder);
else the committed weights from the ledger's blob store; else the genesis weights of the run's
seed. A checkpoint from a peer is used only if its weights hash is the one committed on chain
(``ContributionLedger.checkpointOf(run, r)``) or, for a round not committed yet, the one signed
by a strict majority of that round's members (signed ``CHECKPOINT`` messages). A blob that hashes
otherwise is refused (logged, kept in the rendezvous' refusals) and the next copy is tried.
"""

from __future__ import annotations

import hashlib
import logging
import time
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
        self._refused: set[bytes] = set()

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

    def expected_hash(self, rdv: Rendezvous, round: int) -> tuple[bytes, str] | None:
        """The hash a checkpoint of ``round`` must have, and who vouches for it."""
        committed = self.committed(round)
        if committed is not None:
            return committed, "the chain"
        signed = rdv.signed_checkpoint_hash(round)
        return None if signed is None else (signed, "a majority of the round's members")

    def from_peer(self, rdv: Rendezvous, round: int) -> RoundCheckpoint:
        """The verified checkpoint of ``round`` from the first peer copy whose hash matches."""
        if round == 0:
            return self.verify(genesis_checkpoint(self.model, self.seed, self.run_id), "genesis")
        deadline = time.monotonic() + self.peer_timeout_s
        while True:
            expected = self.expected_hash(rdv, round)
            if expected is not None:
                for key, blob in rdv.checkpoint_blobs(round):
                    found = self._try_blob(rdv, key, blob, round, expected)
                    if found is not None:
                        return found
            if time.monotonic() > deadline:
                raise CheckpointError(
                    f"no copy of round {round}'s checkpoint matching a hash committed on chain or "
                    f"signed by a majority of its members within {self.peer_timeout_s:.0f}s "
                    f"(hash known: {expected is not None}); retry, or start from the ledger"
                )
            time.sleep(0.2)

    def _try_blob(
        self, rdv: Rendezvous, key: str, blob: bytes, round: int, vouched: tuple[bytes, str]
    ) -> RoundCheckpoint | None:
        expected, by = vouched
        digest = hashlib.sha256(blob).digest()
        if digest in self._refused:
            return None
        try:
            ckpt = RoundCheckpoint.from_bytes(blob, expect_hash=expected)
            if ckpt.round != round:
                raise CheckpointError(f"blob holds round {ckpt.round}, not {round}")
        except CheckpointError as exc:
            self._refused.add(digest)
            rdv.board.refuse("hash_mismatch", key, f"{exc.message} (hash vouched for by {by}); "
                             "fetching another copy")  # fmt: skip
            return None
        log.info("checkpoint of round %d from %s matches the hash vouched for by %s",
                 round, key, by)  # fmt: skip
        return self.verify(ckpt, key)

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
        if peer is not None and (local is None or peer > local.round):
            return self.from_peer(rdv, peer)
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
