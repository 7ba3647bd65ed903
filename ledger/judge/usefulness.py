"""Level 2 with the trainer's own test: does the pseudo-gradient lower loss on the node's shard?

Rebuilds the node's deterministic shard (:class:`reference.data.ShardSpec` from run, round, node,
tokens and the TrainingConfig data mixture; its id must equal the attested ``dataShard``, else
:class:`~ledger.judge.tensors.ShardMismatch`), loads the base checkpoint from the blob store, and
calls :func:`reference.usefulness.usefulness` (own shard vs random rows). On by default
(``COLOCO_LEDGER_USEFULNESS_MODEL=tiny``: the model preset the run trains). When the base
checkpoint blob is missing, usefulness is reported as not measured rather than guessed. An update
that does not lower the loss on the rows the node trained on scores 0 (noise, junk); one that
does scores at least :data:`USEFUL_FLOOR` (one node's few steps need not carry over to random
rows, measured on the red team's tiny rounds).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.core.blobstore import BlobStore
from ledger.core.models import Attestation
from ledger.judge.tensors import Measured, ShardMismatch, Tensors, UsefulnessFn

if TYPE_CHECKING:
    from reference.data import Corpus

log = logging.getLogger(__name__)

USEFUL_FLOOR = 0.25


def corpus_of(corpus_dir: Path | None, data_root: bytes | None = None) -> Corpus:
    """The run's corpus (loaded once per folder); with ``data_root`` (the run's
    ``TrainingConfig.dataRoot``) refused (:class:`~reference.manifest.DataMismatch`) when it is
    not the run's data: scoring or replaying on other bytes would judge honest nodes wrong."""
    corpus = _corpus(str(corpus_dir) if corpus_dir is not None else None)
    if data_root is not None:
        from reference.data import check_data

        check_data(corpus, data_root, what="the ledger's corpus (COLOCO_LEDGER_USEFULNESS_CORPUS)")
    return corpus


@cache
def _corpus(folder: str | None) -> Corpus:
    from reference.data import Corpus

    return Corpus.from_folder(folder) if folder is not None else Corpus.stdlib()


def shard_tokens(att: Attestation, governed_steps: int | None) -> list[int]:
    """The shard sizes a node may have drawn: its tokens, or (a time-boxed node that ran fewer
    steps than planned) the governed steps' worth at its tokens per step."""
    sizes = [att.tokens]
    if governed_steps and att.inner_steps and att.tokens % att.inner_steps == 0:
        planned = governed_steps * (att.tokens // att.inner_steps)
        if planned != att.tokens:
            sizes.append(planned)
    return sizes


def matching_shard(att: Attestation, mixture: tuple[int, ...], governed: int | None) -> int | None:
    """The shard size whose id is the attested ``dataShard`` (None: none is)."""
    from reference.data import ShardSpec

    for n in shard_tokens(att, governed):
        spec = ShardSpec.for_node(bytes.fromhex(att.run_id[2:]), att.round, att.node, n, mixture)
        if "0x" + spec.id.hex() == att.data_shard:
            return n
    return None


def trainer_usefulness(
    blobs: BlobStore,
    *,
    preset: str,
    corpus_dir: Path | None,
    rows: int,
    mixture_of: Callable[[], tuple[int, ...]],
    outer_lr_of: Callable[[], float],
    inner_steps_of: Callable[[], int] | None = None,
    data_root_of: Callable[[], bytes | None] = lambda: None,
) -> UsefulnessFn:
    """A :data:`~ledger.judge.tensors.UsefulnessFn` backed by ``reference.usefulness``."""
    from reference.data import ShardSpec
    from reference.manifest import DataMismatch
    from reference.model import GPTConfig
    from reference.usefulness import scoring_rows, usefulness

    config = GPTConfig.preset(preset)

    def score(att: Attestation, pseudo_gradient: Tensors) -> Measured | None:
        base = blobs.tensors(att.base_checkpoint)
        if base is None:
            return None
        mixture = mixture_of()
        size = matching_shard(att, mixture, inner_steps_of() if inner_steps_of else None)
        if size is None:
            raise ShardMismatch(
                f"dataShard {att.data_shard} is not this node's shard for round {att.round} "
                f"and {att.tokens} tokens: train on the shard the protocol assigns"
            )
        spec = ShardSpec.for_node(bytes.fromhex(att.run_id[2:]), att.round, att.node, size, mixture)
        try:
            corpus = corpus_of(corpus_dir, data_root_of())
        except DataMismatch as exc:  # the ledger's fault, not the node's: not measured
            log.error("usefulness not measured: %s", exc.message)
            return None
        own, random = scoring_rows(corpus, spec, config.seq_len, rows)
        report = usefulness(config, base, pseudo_gradient, own, random, outer_lr=outer_lr_of())
        # Work that lowers the loss on the rows it trained on is work: at least USEFUL_FLOOR
        # (a single node's few steps may not carry over to random rows; the average does).
        score = max(report.score, USEFUL_FLOOR) if report.own_drop > 0 else 0.0
        return Measured(
            score,
            f"usefulness {score:.3f}: own-shard loss {report.own_before:.4f} -> "
            f"{report.own_after:.4f}, random {report.random_before:.4f} -> "
            f"{report.random_after:.4f}",
            report.trained_on_shard,
        )

    return score
