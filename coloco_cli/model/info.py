"""What a checkpoint file is: its shape (from the weights) and where the chain names it.

`coloco model info`, `model verify` and `model eval` read a local safetensors file, hash it
canonically (:func:`protocol.hashing.hash_state_dict`, the hash the ledger commits) and look
that hash up on chain: the `RoundCommitted` logs of the deployment (which run and round
committed it, and the verified tokens, `totalWork`, of every round up to it) and
`TrainingConfig.releasedCheckpoint`. The config version a round trained with is what its nodes
attested (the ledger's `GET /v1/runs/{run}/rounds/{round}`), else the chain's TrainingConfig
version at the round's commit.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from protocol.errors import ColocoError, ConfigError

if TYPE_CHECKING:
    import torch

    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

UNIFORM_BYTES_LOSS = math.log(256)
"""The held-out loss (nats per byte) of a model that knows nothing: every byte equally likely."""


@dataclass(frozen=True)
class Shape:
    """The model shape a checkpoint's weights have, and the preset of that shape (if any)."""

    preset: str | None
    n_layer: int
    d_model: int
    seq_len: int
    vocab_size: int
    parameters: int


@dataclass(frozen=True)
class Commit:
    """One `RoundCommitted` log: a run's round, its checkpoint and its verified tokens."""

    run_id: bytes
    round: int
    checkpoint: bytes
    total_work: int
    block: int


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file at `path` (read strictly: protocol.blobs)."""
    from coloco_cli.model.ops import MAX_CHECKPOINT_BYTES
    from protocol.blobs import decode_blob

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"checkpoint {path}: {exc}: fetch one with `coloco model pull`") from None
    return decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES)


def checkpoint_hash(weights: dict[str, torch.Tensor]) -> bytes:
    from protocol.hashing import hash_state_dict

    return bytes(hash_state_dict(weights))


def shape_of(weights: dict[str, torch.Tensor]) -> Shape:
    """The GPT shape of `weights` (reference/model.py's names), matched to a preset."""
    from reference.model import PRESETS

    try:
        vocab, d_model = (int(n) for n in weights["tok_emb.weight"].shape)
        seq_len = int(weights["pos_emb.weight"].shape[0])
    except (KeyError, ValueError):
        raise ConfigError(
            "the file holds no coloco GPT (no tok_emb.weight / pos_emb.weight tensors)"
        ) from None
    layers = {int(m.group(1)) for k in weights if (m := re.match(r"blocks\.(\d+)\.", k))}
    n_layer = max(layers) + 1 if layers else 0
    preset = next(
        (
            name
            for name, cfg in PRESETS.items()
            if (cfg.n_layer, cfg.d_model, cfg.seq_len, cfg.vocab_size)
            == (n_layer, d_model, seq_len, vocab)
        ),
        None,
    )
    params = sum(int(t.numel()) for t in weights.values())
    return Shape(preset, n_layer, d_model, seq_len, vocab, params)


def commits(chain: ChainClient, run_id: bytes | None = None) -> list[Commit]:
    """Every `RoundCommitted` log of the deployment (of `run_id` only, if given), in order."""
    from coloco_cli.logs import event_logs

    logs = event_logs(
        chain,
        "ContributionLedger",
        "RoundCommitted",
        from_block=int(chain.deployment.deployment_block),
        argument_filters={"runId": run_id} if run_id is not None else None,
    )
    return [
        Commit(
            run_id=bytes(ev.args.runId),
            round=int(ev.args.round),
            checkpoint=bytes(ev.args.checkpointHash),
            total_work=int(ev.args.totalWork),
            block=int(ev.blockNumber),
        )
        for ev in logs
    ]


def released(chain: ChainClient) -> bytes:
    from reference.settings import TrainingSettings

    return bytes(TrainingSettings.read(chain).released_checkpoint)


def locate(chain: ChainClient, checkpoint: bytes, run_id: bytes | None = None) -> Commit | None:
    """The committed round whose checkpoint is `checkpoint` (the latest, if several), or None."""
    found = [c for c in commits(chain, run_id) if c.checkpoint == checkpoint]
    return found[-1] if found else None


def config_version(chain: ChainClient, ledger_url: str, commit: Commit) -> tuple[int, str] | None:
    """The config version round `commit` trained with, and where it was read: its nodes'
    attestations (the ledger), else TrainingConfig's version at the round's commit block."""
    if commit.round == 0:
        return None  # the genesis trained nothing
    url = f"{ledger_url.rstrip('/')}/v1/runs/0x{commit.run_id.hex()}/rounds/{commit.round}"
    try:
        resp = httpx.get(url, timeout=10.0)
        scores = resp.json().get("scores", []) if resp.status_code == 200 else []
        versions = sorted({int(s["config_version"]) for s in scores})
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.debug("ledger %s: %s", url, exc)
        versions = []
    if versions:
        return versions[-1], "the nodes' attestations"
    return chain.training_config.version(block=commit.block), "TrainingConfig at its commit"


def describe(
    open_chain: Callable[[], ChainClient], ledger_url: str, path: Path, run_id: bytes | None = None
) -> dict[str, Any]:
    """`coloco model info`: the file's hash and shape; from the chain (when `open_chain()` gives
    one that answers), its run, round, tokens trained (verified tokens of rounds 1..round),
    config version and whether it is released; else why the chain was not read."""
    weights = read_weights(path)
    digest = checkpoint_hash(weights)
    shape = shape_of(weights)
    out: dict[str, Any] = {
        "file": str(path),
        "checkpoint": "0x" + digest.hex(),
        "preset": shape.preset,
        "n_layer": shape.n_layer,
        "d_model": shape.d_model,
        "seq_len": shape.seq_len,
        "vocab_size": shape.vocab_size,
        "parameters": shape.parameters,
        "run_id": None,
        "round": None,
        "last_round": None,
        "tokens_trained": None,
        "config_version": None,
        "config_version_from": None,
        "released": None,
        "chain_unread": None,
    }
    try:
        chain = open_chain()
        history = commits(chain, run_id)
        out["released"] = released(chain) == digest
    except ColocoError as exc:  # the file's own facts stand without a chain
        out["chain_unread"] = exc.message
        return out
    matches = [c for c in history if c.checkpoint == digest]
    if not matches:
        return out
    hit = matches[-1]
    run = [c for c in history if c.run_id == hit.run_id]
    version = config_version(chain, ledger_url, hit)
    out.update(
        run_id="0x" + hit.run_id.hex(),
        round=hit.round,
        last_round=max(c.round for c in run),
        tokens_trained=sum(c.total_work for c in run if c.round <= hit.round),
        config_version=None if version is None else version[0],
        config_version_from=None if version is None else version[1],
    )
    return out


def verify_file(
    chain: ChainClient, path: Path, run_id: bytes | None, round: int | None, want_released: bool
) -> dict[str, Any]:
    """`coloco model verify`: the file's canonical hash against the one the chain commits for
    the run's round (default its last), the released checkpoint, or, with neither given, any
    committed round. CheckpointError naming both hashes when they differ."""
    from coloco_cli.model.ops import expected_hash
    from protocol.errors import CheckpointError

    digest = checkpoint_hash(read_weights(path))
    out: dict[str, Any] = {"file": str(path), "checkpoint": "0x" + digest.hex()}
    if run_id is None and not want_released:
        hit = locate(chain, digest)
        if hit is not None:
            return {**out, "run_id": "0x" + hit.run_id.hex(), "round": hit.round, "match": True}
        if released(chain) == digest:
            return {**out, "run_id": None, "round": None, "released": True, "match": True}
        raise CheckpointError(
            f"{path} hashes to 0x{digest.hex()}, which no run on this chain committed and which "
            "is not the released checkpoint: pass RUN (and --round N) or --released to compare "
            "it with the hash the chain names"
        )
    rid = None if want_released else run_id
    expected, target = expected_hash(chain, rid, round)
    what = "the released checkpoint" if rid is None else f"round {target} of run 0x{rid.hex()}"
    if expected != digest:
        raise CheckpointError(
            f"{path} hashes to 0x{digest.hex()}, but the chain commits 0x{expected.hex()} for "
            f"{what}: the file holds other weights (fetch the committed ones with `coloco model "
            "pull`)"
        )
    return {
        **out,
        "run_id": None if rid is None else "0x" + rid.hex(),
        "round": target,
        "released": rid is None,
        "match": True,
        "what": what,
    }
