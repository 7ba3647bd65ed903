"""Round-boundary checkpoints: the base weights, the outer momentum and the round, as safetensors.

One file per round, ``round_{r:08d}.safetensors`` in the checkpoint folder. Tensors are stored as
``model/<name>`` and ``outer_momentum/<name>``; metadata holds the round, the run id and the
canonical hash of the weights (``resultCheckpoint``, = ``ContributionLedger.checkpointOf``).
Checkpoints exist only at round boundaries: :class:`RoundCheckpoint` has no other constructor than
an :class:`~reference.outer.OuterState` after its outer step.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from protocol.blobs import decode_blob, encode_blob
from protocol.errors import CheckpointError, ColocoError
from protocol.files import DirectWriter
from protocol.hashing import hash_state_dict
from reference.outer import FlatLayout, OuterState

log = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 8 * 1024**3
_MODEL = "model/"
_MOMENTUM = "outer_momentum/"


@dataclass(frozen=True)
class RoundCheckpoint:
    """State at the end of ``round`` (round 0 = genesis)."""

    round: int
    weights: dict[str, Tensor]
    momentum: dict[str, Tensor]
    run_id: bytes = bytes(32)

    @classmethod
    def of(cls, state: OuterState, round: int, run_id: bytes = bytes(32)) -> RoundCheckpoint:
        return cls(round, state.weights(), state.momentum_tensors(), run_id)

    @property
    def weights_hash(self) -> bytes:
        """Canonical hash of the weights alone (the on-chain checkpoint hash)."""
        return bytes(hash_state_dict(self.weights))

    def to_state(self) -> OuterState:
        layout = FlatLayout({n: t.shape for n, t in self.weights.items()})
        if set(self.momentum) != set(self.weights):
            raise CheckpointError("checkpoint momentum and weights name different tensors")
        return OuterState(layout, layout.flatten(self.weights), layout.flatten(self.momentum))

    def to_bytes(self) -> bytes:
        tensors = {_MODEL + n: t for n, t in self.weights.items()}
        tensors |= {_MOMENTUM + n: t for n, t in self.momentum.items()}
        meta = {
            "round": str(self.round),
            "run_id": self.run_id.hex(),
            "weights_hash": self.weights_hash.hex(),
        }
        return _canonical_header(encode_blob(tensors, meta))

    @classmethod
    def from_bytes(cls, data: bytes, *, expect_hash: bytes | None = None) -> RoundCheckpoint:
        """Parse a checkpoint blob; with ``expect_hash``, refuse weights that hash differently."""
        try:
            tensors = decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES)
            meta = _metadata(data)
            round_ = int(meta["round"])
            run_id = bytes.fromhex(meta.get("run_id", "00" * 32))
        except (ColocoError, KeyError, ValueError) as exc:
            raise CheckpointError(f"not a coloco checkpoint blob: {exc}") from exc
        weights = {k[len(_MODEL) :]: v for k, v in tensors.items() if k.startswith(_MODEL)}
        momentum = {k[len(_MOMENTUM) :]: v for k, v in tensors.items() if k.startswith(_MOMENTUM)}
        ckpt = cls(round_, weights, momentum, run_id)
        actual = ckpt.weights_hash
        if expect_hash is not None and actual != expect_hash:
            raise CheckpointError(
                f"checkpoint of round {round_} hashes to 0x{actual.hex()}, expected "
                f"0x{expect_hash.hex()}: the blob is corrupt or from another run; fetch it again"
            )
        if meta.get("weights_hash") not in (None, actual.hex()):
            raise CheckpointError(f"checkpoint of round {round_}: metadata hash disagrees")
        return ckpt


def _canonical_header(data: bytes) -> bytes:
    """The same blob with its JSON header's keys sorted: safetensors writes ``__metadata__`` in
    hash-map order, which differs between processes, and every honest member must serve the very
    same bytes (one signed manifest, chunks fetched from several members)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    canonical = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    if len(canonical) > n:  # cannot happen for safetensors' compact header; keep it as it is
        return data
    return data[:8] + canonical.ljust(n) + data[8 + n :]


def _metadata(data: bytes) -> dict[str, str]:
    (n,) = struct.unpack("<Q", data[:8])
    meta = json.loads(data[8 : 8 + n]).get("__metadata__", {})
    if not isinstance(meta, dict):
        raise CheckpointError("checkpoint metadata is not an object")
    return {str(k): str(v) for k, v in meta.items()}


class CheckpointDir:
    """A node's checkpoint folder: atomic writes, newest round first."""

    def __init__(self, path: str | Path, *, keep: int = 3) -> None:
        self.path = Path(path)
        self.keep = keep
        self._writer = DirectWriter()

    def file_for(self, round: int) -> Path:
        return self.path / f"round_{round:08d}.safetensors"

    def save(self, ckpt: RoundCheckpoint) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.file_for(ckpt.round)
        self._writer.write(target, ckpt.to_bytes())  # O_DIRECT, through a temporary
        for old in self.rounds()[: -self.keep] if self.keep > 0 else []:
            self.file_for(old).unlink(missing_ok=True)
        log.info("checkpoint round %d -> %s", ckpt.round, target)
        return target

    def rounds(self) -> list[int]:
        if not self.path.is_dir():
            return []
        out = []
        for p in self.path.glob("round_*.safetensors"):
            try:
                out.append(int(p.stem.removeprefix("round_")))
            except ValueError:
                continue
        return sorted(out)

    def latest(self) -> RoundCheckpoint | None:
        rounds = self.rounds()
        if not rounds:
            return None
        return self.load(rounds[-1])

    def load(self, round: int) -> RoundCheckpoint:
        path = self.file_for(round)
        if not path.is_file():
            raise CheckpointError(f"no checkpoint for round {round} in {self.path}")
        return RoundCheckpoint.from_bytes(path.read_bytes())


def load_weights_into(model: torch.nn.Module, weights: dict[str, Tensor]) -> None:
    missing = {n for n, _ in model.named_parameters()} - set(weights)
    if missing:
        raise CheckpointError(f"checkpoint lacks tensors {sorted(missing)}: wrong model preset?")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.shape != weights[name].shape:
                raise CheckpointError(
                    f"checkpoint tensor {name} has shape {tuple(weights[name].shape)}, "
                    f"model expects {tuple(p.shape)}: wrong model preset?"
                )
            p.copy_(weights[name])
