"""A small, readable GPT (decoder-only transformer) over byte tokens.

The shape lives in :class:`GPTConfig`; named presets cover a CPU-sized ``tiny`` model and larger
GPU models. Initialisation is a pure function of ``(config, seed)`` through a private generator,
so every node builds the same genesis weights without exchanging a byte.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812 - the usual torch alias

from protocol.errors import ConfigError


@dataclass(frozen=True)
class GPTConfig:
    """Shape of the model. ``vocab_size`` is 256: one token per byte."""

    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    seq_len: int = 64
    vocab_size: int = 256
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"GPTConfig.{f.name} must be a positive int, got {value!r}")
        if self.d_model % self.n_head:
            raise ConfigError(
                f"GPTConfig.d_model ({self.d_model}) must be divisible by n_head ({self.n_head})"
            )

    @classmethod
    def preset(cls, name: str) -> GPTConfig:
        """One of :data:`PRESETS` by name (``tiny``, ``small``, ``medium``, ``large``)."""
        try:
            return PRESETS[name]
        except KeyError:
            raise ConfigError(
                f"unknown model preset {name!r}: choose one of {', '.join(PRESETS)}"
            ) from None

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown GPTConfig keys: {sorted(unknown)}")
        return cls(**data)


PRESETS: dict[str, GPTConfig] = {
    # ~0.12M parameters: trains on a 2-core CPU in minutes.
    "tiny": GPTConfig(n_layer=2, n_head=4, d_model=64, seq_len=64),
    # ~10.7M parameters with short rows: the network benchmark on 2 CPU cores (~0.5 s/step).
    "cpu10m": GPTConfig(n_layer=6, n_head=6, d_model=384, seq_len=32),
    # ~10.7M parameters: one consumer GPU.
    "small": GPTConfig(n_layer=6, n_head=6, d_model=384, seq_len=256),
    # ~85M parameters (GPT-2 small shape on bytes).
    "medium": GPTConfig(n_layer=12, n_head=12, d_model=768, seq_len=1024),
    # ~300M parameters.
    "large": GPTConfig(n_layer=24, n_head=16, d_model=1024, seq_len=1024),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: Tensor = self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return out


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=False)
        self.down = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down(F.gelu(self.up(x)))
        return out


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        out: Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    """Token + position embeddings, ``n_layer`` pre-norm blocks, a tied output head."""

    def __init__(self, cfg: GPTConfig, *, seed: int = 0, init: bool = True) -> None:
        """``init`` False: torch's default init only, not the run's seeded one, for a model
        whose every parameter is loaded next (a replay's: reference.segment); building on the
        meta device instead costs more than it saves at the sizes replayed on a CPU."""
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        if init:
            self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Deterministic init (GPT-2 style) from ``seed``: the run's genesis weights."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        residual_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for name, p in sorted(self.named_parameters()):
            if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")):
                values = torch.ones(p.shape)
            elif name.endswith(("ln1.bias", "ln2.bias", "ln_f.bias")):
                values = torch.zeros(p.shape)
            else:
                std = residual_std if name.endswith(("proj.weight", "down.weight")) else 0.02
                values = torch.randn(p.shape, generator=gen) * std
            p.copy_(values)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        _, t = idx.shape
        if t > self.cfg.seq_len:
            raise ConfigError(f"sequence of {t} tokens exceeds seq_len {self.cfg.seq_len}")
        pos = torch.arange(t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tok_emb.weight.t()
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def genesis_state(cfg: GPTConfig, seed: int) -> dict[str, Tensor]:
    """The genesis weights of a run (round 0): a CPU fp32 state dict, a pure function of inputs."""
    return {k: v.detach().clone() for k, v in GPT(cfg, seed=seed).state_dict().items()}


@torch.no_grad()
def evaluate(model: GPT, batches: Tensor, *, batch_size: int = 32) -> float:
    """Mean next-token cross-entropy (nats) over ``batches``: int64 ``[n, seq_len + 1]`` rows."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, batches.shape[0], batch_size):
        rows = batches[start : start + batch_size].to(device)
        _, loss = model(rows[:, :-1], rows[:, 1:])
        assert loss is not None
        total += float(loss) * rows.shape[0]
        count += rows.shape[0]
    model.train(was_training)
    if count == 0:
        raise ConfigError("evaluate() got no rows: the eval split is empty")
    return total / count
