"""Is a pseudo-gradient useful? A CPU-cheap test the ledger runs without training internals.

Apply the pseudo-gradient alone to the base weights (``base - outer_lr * pg``: one outer SGD step,
no momentum) and measure the loss on the node's own shard and on random data, before and after.
Honest work lowers both, its own shard a little more; a zero vector lowers nothing; noise raises
the loss on random data. ``score`` in [0, 1] is twice the share of the own-shard improvement that
carries over to random data, capped at 1 (0 when there is no own-shard improvement or random data
gets worse). Honest tiny-model rounds carry over about 55-60% (measured), so they score 1.

Typical use by the ledger (rows from :meth:`reference.data.Corpus.shard_rows` of the node's
:class:`~reference.data.ShardSpec` and :meth:`~reference.data.Corpus.random_rows`; a few dozen rows
each keep it well under a second for the tiny model)::

    report = usefulness(GPTConfig.preset("tiny"), base_state, pg_tensors,
                        own_rows[:32], random_rows[:32], outer_lr=0.7)
    quality = report.score
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from protocol.errors import ConfigError
from reference.checkpoint import load_weights_into
from reference.data import Corpus, ShardSpec
from reference.model import GPT, GPTConfig, evaluate


@dataclass(frozen=True)
class UsefulnessReport:
    own_before: float
    own_after: float
    random_before: float
    random_after: float

    @property
    def own_drop(self) -> float:
        return self.own_before - self.own_after

    @property
    def random_drop(self) -> float:
        return self.random_before - self.random_after

    @property
    def trained_on_shard(self) -> bool:
        """The own shard improved more than random data: evidence the node used its shard."""
        return self.own_drop > self.random_drop

    @property
    def score(self) -> float:
        if self.own_drop <= 0.0 or self.random_drop <= 0.0:
            return 0.0
        return float(min(1.0, 2.0 * self.random_drop / self.own_drop))


@torch.no_grad()
def usefulness(  # noqa: PLR0917 - the ledger's documented call signature
    model_config: GPTConfig,
    base_state: Mapping[str, Tensor],
    pseudo_gradient: Mapping[str, Tensor],
    own_tokens: Tensor,
    random_tokens: Tensor,
    outer_lr: float = 0.7,
) -> UsefulnessReport:
    """Loss on own vs random rows (int64 ``[n, seq_len + 1]``) before/after ``base - lr * pg``."""
    if set(pseudo_gradient) != set(base_state):
        raise ConfigError(
            "pseudo-gradient and base weights name different tensors: "
            f"{sorted(set(pseudo_gradient) ^ set(base_state))[:5]}"
        )
    for name, t in pseudo_gradient.items():
        if t.shape != base_state[name].shape:
            raise ConfigError(f"pseudo-gradient {name} has shape {tuple(t.shape)}, "
                              f"base has {tuple(base_state[name].shape)}")  # fmt: skip
    torch_threads = torch.get_num_threads()
    model = GPT(model_config)
    load_weights_into(model, dict(base_state))
    own_before = evaluate(model, own_tokens)
    random_before = evaluate(model, random_tokens)
    stepped = {n: base_state[n].float() - outer_lr * pseudo_gradient[n].float() for n in base_state}
    load_weights_into(model, stepped)
    report = UsefulnessReport(
        own_before, evaluate(model, own_tokens), random_before, evaluate(model, random_tokens)
    )
    torch.set_num_threads(torch_threads)
    return report


def scoring_rows(
    corpus: Corpus, spec: ShardSpec, seq_len: int, n_rows: int = 32, *, seed: int = 99
) -> tuple[Tensor, Tensor]:
    """(own rows, random rows) for :func:`usefulness`: the first ``n_rows`` the node trained on
    (the inner trainer consumes rows in order) and ``n_rows`` random rows of the corpus."""
    own = corpus.shard_rows(spec, seq_len, limit=n_rows)  # never the whole declared shard
    return own, corpus.random_rows(seq_len, n_rows, seed=seed)
