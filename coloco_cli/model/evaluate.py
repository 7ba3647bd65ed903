"""`coloco model eval`: a checkpoint's held-out loss beside the previous round's and the
uniform-bytes baseline (ln 256 = 5.545 nats per byte: a model that has learnt nothing).

The previous round is found by the file's canonical hash on chain (coloco_cli.model.info): the
run's round committed before this one, pulled from the ledger and checked against the chain
(coloco_cli.model.ops.fetch), then scored on the same held-out rows; or `--previous FILE`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coloco_cli.model.info import (
    UNIFORM_BYTES_LOSS,
    checkpoint_hash,
    commits,
    read_weights,
    shape_of,
)
from protocol.errors import ColocoError, ConfigError

if TYPE_CHECKING:
    from coloco_cli.tx import TxOptions

log = logging.getLogger(__name__)


def compare(
    opts: TxOptions, path: Path, preset: str | None, rows: int, previous: Path | None
) -> dict[str, Any]:
    """The loss of `path` and of the previous round (or `previous`), on the same `rows`."""
    from coloco_cli.model.ops import held_out_loss, model_of

    weights = read_weights(path)
    name = preset or shape_of(weights).preset
    if name is None:
        raise ConfigError(f"{path} has no preset's shape (see `coloco model info`): pass --model")
    loss = held_out_loss(model_of(weights, name, f"checkpoint {path}"), rows)
    out: dict[str, Any] = {
        "checkpoint": str(path),
        "model": name,
        "rows": rows,
        "eval_loss": round(loss, 5),
        "uniform_baseline": round(UNIFORM_BYTES_LOSS, 5),
        "run_id": None,
        "round": None,
        "previous": None,
        "previous_unknown": None,
    }
    if previous is not None:
        prev = model_of(read_weights(previous), name, f"checkpoint {previous}")
        out["previous"] = {"what": str(previous), "eval_loss": round(held_out_loss(prev, rows), 5)}
        return out
    try:
        found = _previous_round(opts, checkpoint_hash(weights))
    except ColocoError as exc:
        found = f"not found ({exc.message}); pass --previous FILE"
    if isinstance(found, str):
        out["previous_unknown"] = found
        return out
    run_id, rnd, prev_round, prev_weights = found
    out.update(run_id=run_id, round=rnd)
    prev = model_of(prev_weights, name, f"round {prev_round}'s checkpoint")
    out["previous"] = {
        "what": f"round {prev_round}",
        "round": prev_round,
        "eval_loss": round(held_out_loss(prev, rows), 5),
    }
    return out


def _previous_round(opts: TxOptions, digest: bytes) -> str | tuple[str, int, int, Any]:
    """(run, round, previous round, its weights) of the file with hash `digest`, or why not."""
    from coloco_cli.model.ops import MAX_CHECKPOINT_BYTES, fetch
    from coloco_cli.tx import open_chain
    from protocol.blobs import decode_blob

    ep = opts.endpoints()
    history = commits(open_chain(ep))
    hit = next((c for c in reversed(history) if c.checkpoint == digest), None)
    if hit is None:
        return "unknown: no round on this chain committed this file; pass --previous FILE"
    run = "0x" + hit.run_id.hex()
    before = [c for c in history if c.run_id == hit.run_id and c.round < hit.round]
    if not before:
        return f"none: this is round {hit.round}, the genesis of run {run}"
    prev = before[-1]
    data, _ = fetch([ep.ledger_url], prev.checkpoint)  # checked against the chain's hash
    return run, hit.round, prev.round, decode_blob(data, max_bytes=MAX_CHECKPOINT_BYTES)
