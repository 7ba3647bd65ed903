"""Level 2 with the trainer's own test: does the pseudo-gradient lower loss on the node's shard?

Rebuilds the node's deterministic shard (:class:`trainer.data.ShardSpec` from run, round, node,
tokens and the TrainingConfig data mixture; its id must equal the attested ``dataShard``), loads
the base checkpoint from the blob store, and calls :func:`trainer.scoring.usefulness` (own shard
vs random rows). Enabled by ``COLOCO_LEDGER_USEFULNESS_MODEL`` (a model preset, e.g. ``tiny``).
When the base checkpoint blob is missing or the shard cannot be rebuilt, usefulness is reported
as not measured rather than guessed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from ledger.blobstore import BlobStore
from ledger.models import Attestation
from ledger.quality import Tensors, UsefulnessFn

log = logging.getLogger(__name__)


def trainer_usefulness(
    blobs: BlobStore,
    *,
    preset: str,
    corpus_dir: Path | None,
    rows: int,
    mixture_of: Callable[[], tuple[int, ...]],
    outer_lr_of: Callable[[], float],
) -> UsefulnessFn:
    """A :data:`~ledger.quality.UsefulnessFn` backed by ``trainer.scoring``."""
    from trainer.commitment import named
    from trainer.data import Corpus, ShardSpec
    from trainer.model import GPTConfig
    from trainer.scoring import scoring_rows, usefulness

    config = GPTConfig.preset(preset)

    @cache
    def corpus() -> Any:
        return Corpus.from_folder(corpus_dir) if corpus_dir is not None else Corpus.stdlib()

    def score(att: Attestation, pseudo_gradient: Tensors) -> tuple[float, str] | None:
        base = blobs.tensors(att.base_checkpoint)
        if base is None:
            return None
        spec = ShardSpec.for_node(
            bytes.fromhex(att.run_id[2:]), att.round, att.node, att.tokens, mixture_of()
        )
        if "0x" + spec.id.hex() != att.data_shard:
            return None
        pseudo_gradient = named(pseudo_gradient, {n: t.shape for n, t in base.items()})
        own, random = scoring_rows(corpus(), spec, config.seq_len, rows)
        report = usefulness(config, base, pseudo_gradient, own, random, outer_lr=outer_lr_of())
        return report.score, (
            f"usefulness {report.score:.3f}: own-shard loss {report.own_before:.4f} -> "
            f"{report.own_after:.4f}, random {report.random_before:.4f} -> "
            f"{report.random_after:.4f}"
        )

    return score
