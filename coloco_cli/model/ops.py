"""Fetch a checkpoint, check it against the chain, evaluate it, sample from it.

A checkpoint is what the chain names: `ContributionLedger.checkpointOf(run, round)` for a committed
round, or `TrainingConfig.releasedCheckpoint` for the released model. The bytes come from the
ledger's blob store (or any peer serving `/v1/blobs/{hash}`), and are accepted only if their
canonical hash (`protocol.hashing.hash_state_dict`) is the one on chain.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from protocol.errors import CheckpointError, ConfigError, LedgerUnavailableError

if TYPE_CHECKING:
    import torch

    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 2 << 30


@dataclass(frozen=True)
class Pulled:
    run_id: str | None
    round: int | None
    checkpoint: str
    source: str
    path: str
    bytes: int


def expected_hash(
    chain: ChainClient, run_id: bytes | None, round: int | None
) -> tuple[bytes, int | None]:
    """The hash the chain names: the released checkpoint (run_id None) or a committed round's."""
    from protocol.types import RoundNumber, RunId
    from reference.settings import TrainingSettings

    if run_id is None:
        released = bytes(TrainingSettings.read(chain).released_checkpoint)
        if not any(released):
            raise ConfigError(
                "no checkpoint is released yet (TrainingConfig.releasedCheckpoint is zero): pull a "
                "committed round with `coloco model pull RUN_ID`, or propose a release"
            )
        return released, None
    rid = RunId(run_id)
    if not chain.has_committed(rid):
        raise ConfigError(f"run 0x{run_id.hex()} is not open on this chain: see `coloco run list`")
    last = int(chain.last_round(rid))
    target = last if round is None else round
    if target > last:
        raise ConfigError(f"round {target} is not committed yet (the last is {last})")
    onchain = bytes(chain.checkpoint_of(rid, RoundNumber(target)))
    if not any(onchain):
        raise ConfigError(f"round {target} of run 0x{run_id.hex()} has no checkpoint on chain")
    return onchain, target


def verify(data: bytes, expected: bytes) -> dict[str, torch.Tensor]:
    """The weights in `data`, if they hash to `expected`; else CheckpointError."""
    from protocol.blobs import decode_blob
    from protocol.hashing import hash_state_dict

    weights = decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES)
    actual = bytes(hash_state_dict(weights))
    if actual != expected:
        raise CheckpointError(
            f"the checkpoint's weights hash to 0x{actual.hex()}, but the chain says "
            f"0x{expected.hex()}: the source served other bytes; try another --source"
        )
    return weights


def fetch(sources: list[str], expected: bytes) -> tuple[bytes, str]:
    """The first source's blob that verifies against `expected`; (bytes, source URL)."""
    problems = []
    for base in sources:
        url = f"{base.rstrip('/')}/v1/blobs/0x{expected.hex()}"
        try:
            resp = httpx.get(url, timeout=120.0)
        except httpx.HTTPError as exc:
            problems.append(f"{base}: {exc.__class__.__name__}")
            continue
        if resp.status_code != 200:
            problems.append(f"{base}: HTTP {resp.status_code}")
            continue
        try:
            verify(resp.content, expected)
        except Exception as exc:  # a bad peer (any malformed bytes) must not stop the next one
            problems.append(f"{base}: {exc}")
            continue
        return resp.content, base
    raise LedgerUnavailableError(
        f"no source served checkpoint 0x{expected.hex()} that matches the chain: "
        + "; ".join(problems)
    )


def load_model(path: Path, preset: str) -> Any:
    """A GPT of `preset`'s shape holding the weights in the safetensors file at `path`."""
    from protocol.blobs import decode_blob

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"checkpoint {path}: {exc}: fetch one with `coloco model pull`") from None
    return model_of(decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES), preset, f"checkpoint {path}")


def model_of(weights: dict[str, torch.Tensor], preset: str, what: str) -> Any:
    """A GPT of `preset`'s shape holding `weights` (`what` names them in an error)."""
    from reference.model import GPT, GPTConfig

    model = GPT(GPTConfig.preset(preset))
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as exc:
        raise ConfigError(
            f"{what} does not fit the {preset!r} model: {str(exc)[:200]}; pass the run's --model"
        ) from None
    model.eval()
    return model


def held_out_loss(model: Any, rows: int | None = None) -> float:
    """Mean next-byte cross-entropy (nats) on the default corpus's held-out split: the rows
    (reference.data.EVAL_ROWS, EVAL_SEED) the nodes and the dashboard report, unless `rows`."""
    from reference.data import EVAL_ROWS, Corpus
    from reference.model import evaluate

    batches = Corpus.load(None).eval_rows(model.cfg.seq_len, rows or EVAL_ROWS)
    return float(evaluate(model, batches))


def sample(model: Any, prompt: str, *, tokens: int, temperature: float, seed: int) -> str:
    """Continue `prompt` byte by byte (the model's tokens are bytes)."""
    import torch

    if tokens < 1:
        raise ConfigError("--tokens must be at least 1")
    if temperature < 0:
        raise ConfigError("--temperature must be 0 (greedy) or more")
    gen = torch.Generator().manual_seed(seed)
    idx = torch.tensor([list(prompt.encode())[-model.cfg.seq_len :] or [10]], dtype=torch.long)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(tokens):
            logits, _ = model(idx[:, -model.cfg.seq_len :])
            last = logits[0, -1]
            if temperature == 0:
                nxt = int(torch.argmax(last))
            else:
                probs = torch.softmax(last / temperature, dim=-1)
                nxt = int(torch.multinomial(probs, 1, generator=gen))
            out.append(nxt)
            idx = torch.cat([idx, torch.tensor([[nxt]])], dim=1)
    return bytes(out).decode("utf-8", errors="replace")
