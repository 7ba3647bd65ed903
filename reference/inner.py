"""The plain trainer: AdamW steps over token rows. DiLoCo wraps it; fully synchronous data
parallel (the benchmark's baseline) is this same trainer with a larger batch.

The AdamW state lives as long as the trainer (as in DiLoCo: each worker keeps its inner optimizer
across rounds); ``keep_state=False`` starts a fresh AdamW on every call instead, which makes one
round a pure function of (base weights, shard rows, config) for replays. The learning rate can
follow a warmup + cosine schedule over ``schedule_steps`` steps (0: constant), counted across calls
when the state is kept and from each call's first step when it is fresh (so a replay of one round
sees the same learning rates).

The default AdamW betas, (0.7, 0.95), are a protocol constant (not governed, the same on every node
and in the ledger's replay): with a fresh AdamW every round, the paper's beta1 0.9 restarts a
slow momentum each round and trails (validation loss, docs/trainer.md "Benchmark"). So is the
per-call warmup, DEFAULT_WARMUP_STEPS (none): a 3-step warmup with beta2 0.99 lowered DiLoCo's
validation loss but the baseline's as much, and the ledger's fresh-AdamW fingerprints
(ledger/judge/steps.py) rely on a first step of about lr and no step much above lr. And so is
DEFAULT_EPS (1e-4): it lowers DiLoCo's validation loss and not the baseline's (same eps), and it
damps the chaotic spread of a replay whose kernels differ from the node's (docs/trainer.md).
A state carried across rounds has its own constants (CARRIED_BETAS, CARRIED_EPS,
CARRIED_WARMUP_STEPS: :meth:`InnerConfig.protocol`), and CARRY_STATE is the protocol's one switch
between the two modes.

The ledger's reference computations (the replay of a round, the fingerprints' probe) run inside
:func:`one_thread`: torch's result depends on how many threads split a reduction, and a node
started with ``OMP_NUM_THREADS=1`` (as the demo's are) is then matched bit for bit.

A node whose work is audited trains inside :func:`pinned`: fp32 (no bf16 autocast), TF32 off for
matmul and cuDNN, ``torch.use_deterministic_algorithms(True)`` with a deterministic cuBLAS
workspace, on however many threads it likes (the segment audit's tolerance holds on any count).
bf16 autocast on a GPU (``coloco node run --bf16``)
is faster but the ledger's fp32 CPU replay cannot match it: its rounds fail the audit.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
from torch import Tensor

from protocol.errors import ConfigError, TrainerError
from reference.model import GPT

log = logging.getLogger(__name__)
# for a fresh AdamW per round, chosen on bench.diloco's validation half (docs/trainer.md)
DEFAULT_BETAS = (0.7, 0.95)
# no lr warmup: the first step moves every weight by lr (what ledger.judge.steps checks)
DEFAULT_WARMUP_STEPS = 0
# AdamW's eps: 1e-4 rather than torch's 1e-8 tempers the fresh state's sign-like steps on the
# coordinates whose gradient is tiny (chosen on bench.diloco's validation half, docs/trainer.md)
DEFAULT_EPS = 1e-4
# The protocol's one switch between the two inner optimizers: False, a fresh AdamW every round (a
# round replays from public inputs: what the ledger's whole-round replay and the fingerprints of
# ledger.judge.steps check); True, each node keeps its AdamW state across rounds (the DiLoCo
# paper), which those checks cannot follow until they read a committed state (docs/trainer.md,
# "The carried inner state").
CARRY_STATE = True
# AdamW for a state carried across rounds, chosen on bench.diloco's validation half like the fresh
# ones (docs/trainer.md, "The carried inner state": seed 0, betas (0.7 / 0.8 / 0.9, 0.95) and
# (0.9, 0.99): 1.8134 / 1.8047 / 1.8189 / 1.8272). The warmup runs once per fresh state (a node's
# first round, after a rejoin, a checkpoint load or a change of the inner config), never per
# round: without it the cpu10m preset's first round from genesis went chaotic at steps 25-35 (a
# 2-thread node replayed on 1 thread: segment error 0.0547, above the smallest cheat's 4.3e-3);
# 10 steps of it: 5.2e-7 (25: 6.6e-7), validation loss ratio over 3 seeds 1.0235 +- 0.0046
# against 1.0239 +- 0.0075 without (25: 1.0247) (docs/ledger.md, "A warmup for a fresh state")
CARRIED_BETAS = (0.8, 0.95)
CARRIED_EPS = DEFAULT_EPS
CARRIED_WARMUP_STEPS = 10


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run torch on ``threads`` intra-op threads inside the block (None: the process's setting),
    then restore the process's setting."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def one_thread() -> AbstractContextManager[None]:
    """Run torch on one intra-op thread inside the block (the protocol's reference computation),
    then restore the process's setting."""
    return torch_threads(1)


# cuBLAS's deterministic workspace (torch.use_deterministic_algorithms needs one of these set
# before cuBLAS makes its first handle)
CUBLAS_WORKSPACE = ":4096:8"
_PINNED: ContextVar[bool] = ContextVar("pinned", default=False)


def is_pinned() -> bool:
    """Whether the calling code runs inside :func:`pinned` (then no bf16 autocast)."""
    return _PINNED.get()


@contextmanager
def pinned(device: torch.device | str) -> Iterator[None]:
    """The pinned precision an audited node trains in on ``device``: fp32 (InnerTrainer's bf16
    autocast off), TF32 off for matmul and cuDNN, cuDNN deterministic and not benchmarking,
    ``torch.use_deterministic_algorithms(True)`` and ``CUBLAS_WORKSPACE_CONFIG``. The thread
    count is left as it is: the ledger's segment audit holds on any number of CPU threads
    (``bench.audit``). Every setting is restored on exit."""
    device = torch.device(device)
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (cuda.allow_tf32, cudnn.allow_tf32, cudnn.deterministic, cudnn.benchmark,
             torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.get_float32_matmul_precision(),
             os.environ.get("CUBLAS_WORKSPACE_CONFIG"))  # fmt: skip
    token = _PINNED.set(True)
    try:
        cuda.allow_tf32 = False
        cudnn.allow_tf32 = False
        cudnn.deterministic = True
        cudnn.benchmark = False
        torch.set_float32_matmul_precision("highest")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.use_deterministic_algorithms(True)
        yield
    finally:
        _PINNED.reset(token)
        cuda.allow_tf32, cudnn.allow_tf32, cudnn.deterministic, cudnn.benchmark = saved[:4]
        torch.use_deterministic_algorithms(saved[4], warn_only=saved[5])
        torch.set_float32_matmul_precision(saved[6])
        if saved[7] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[7]


def autocast_bf16(device: torch.device) -> bool:
    """Whether :class:`InnerTrainer` runs its forward pass under bf16 autocast on ``device``: on
    a GPU outside :func:`pinned` only."""
    return device.type == "cuda" and not is_pinned()


def precision(device: torch.device | str, *, bf16: bool = False) -> AbstractContextManager[None]:
    """The precision a node trains its inner steps in on ``device``: :func:`pinned` (what the
    audit replays), or with ``bf16`` (a GPU only) torch's bf16 autocast, whose rounds fail the
    audit."""
    device = torch.device(device)
    if not bf16:
        return pinned(device)
    if device.type != "cuda":
        raise ConfigError(
            f"bf16 autocast is for a GPU (--device cuda), not {device.type}: drop --bf16"
        )
    log.warning("bf16 autocast on %s: the ledger's fp32 replay cannot match it, the audited "
                "rounds of this node fail the audit", device)  # fmt: skip
    return nullcontext()


@dataclass(frozen=True)
class InnerConfig:
    """Inner optimisation: ``steps`` AdamW steps of ``batch_size`` rows at learning rate ``lr``."""

    steps: int
    lr: float
    batch_size: int = 16
    weight_decay: float = 0.0
    betas: tuple[float, float] = DEFAULT_BETAS
    eps: float = DEFAULT_EPS
    grad_clip: float = 1.0
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    schedule_steps: int = 0
    min_lr_ratio: float = 0.1

    def __post_init__(self) -> None:
        if self.steps <= 0:
            raise ConfigError(f"inner steps must be positive, got {self.steps}")
        if not 0.0 < self.lr < 1.0:
            raise ConfigError(f"inner lr must be in (0, 1), got {self.lr}")
        if self.batch_size <= 0:
            raise ConfigError(f"inner batch_size must be positive, got {self.batch_size}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}")

    @classmethod
    def protocol(cls, steps: int, lr: float, batch_size: int, *, carried: bool) -> InnerConfig:
        """The protocol's AdamW for ``steps`` steps at ``lr``: the fresh state's constants, or the
        carried state's (``carried``)."""
        if carried:
            return cls(steps, lr, batch_size, betas=CARRIED_BETAS, eps=CARRIED_EPS,
                       warmup_steps=CARRIED_WARMUP_STEPS)  # fmt: skip
        return cls(steps, lr, batch_size)

    def tokens(self, seq_len: int) -> int:
        """Tokens one call to :meth:`InnerTrainer.train` consumes."""
        return self.steps * self.batch_size * seq_len


@dataclass
class StepInfo:
    """One inner step done (for progress displays; nothing of it is signed or replayed)."""

    step: int
    loss: float
    tokens_per_s: float
    of: int = 0
    """The inner steps H this phase runs (a time box may stop it earlier)."""
    elapsed_s: float = 0.0
    """Seconds since the phase's first step started."""


@dataclass
class InnerResult:
    steps: int
    tokens: int
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")


def lr_at(cfg: InnerConfig, step: int) -> float:
    """The learning rate of inner step ``step`` (0-based, on the schedule's count) under ``cfg``:
    the warmup, then the cosine over ``schedule_steps`` (0: constant ``cfg.lr``)."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule_steps:
        span = max(cfg.schedule_steps - cfg.warmup_steps, 1)
        progress = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
        ratio = cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        return cfg.lr * ratio
    return cfg.lr


class InnerTrainer:
    """Runs AdamW steps on a model; knows nothing of rounds, peers or chains."""

    def __init__(self, model: GPT, cfg: InnerConfig, *, keep_state: bool = True) -> None:
        self.model = model
        self.cfg = cfg
        self.keep_state = keep_state
        self.device = next(model.parameters()).device
        self.global_step = 0
        self._opt: torch.optim.AdamW | None = None

    def _lr_at(self, step: int) -> float:
        return lr_at(self.cfg, step)

    def optimizer(self) -> torch.optim.AdamW:
        if self._opt is None or not self.keep_state:
            cfg = self.cfg
            self._opt = torch.optim.AdamW(
                self.model.parameters(),
                lr=cfg.lr,
                betas=cfg.betas,
                eps=cfg.eps,
                weight_decay=cfg.weight_decay,
            )
        return self._opt

    def train(
        self,
        rows: Tensor,
        *,
        on_step: Callable[[StepInfo], None] | None = None,
        budget_s: float | None = None,
        on_boundary: Callable[[int], None] | None = None,
        trace_interval: int = 0,
    ) -> InnerResult:
        """Run ``cfg.steps`` steps over ``rows`` (int64 ``[n, seq_len + 1]``) in order.

        ``budget_s`` time-boxes the phase (heterogeneous nodes): after the first step, a step
        starts only if the mean step time so far says it ends within the budget; the result
        declares the steps and tokens actually run (a slower node runs fewer, and is weighted
        and paid by those tokens).

        ``on_boundary(steps_done)`` (reference.trace.TraceBuilder) is called before the first
        step, after every ``trace_interval``-th step and after the last step run."""
        if on_boundary is not None and trace_interval <= 0:
            raise ConfigError(f"trace_interval must be at least 1, got {trace_interval}")
        if budget_s is not None and budget_s <= 0:
            raise ConfigError(f"inner time budget must be positive, got {budget_s} s")
        cfg = self.cfg
        needed = cfg.steps * cfg.batch_size
        if rows.shape[0] < needed:
            raise TrainerError(
                f"shard has {rows.shape[0]} rows but {cfg.steps} steps x {cfg.batch_size} "
                f"rows need {needed}"
            )
        opt = self.optimizer()
        if not self.keep_state:
            self.global_step = 0  # fresh state: the schedule restarts with the round (replayable)
        self.model.train()
        result = InnerResult(steps=0, tokens=0)
        start = time.perf_counter()
        if on_boundary is not None:
            on_boundary(0)
        for step in range(cfg.steps):
            if budget_s is not None and step > 0:
                elapsed = time.perf_counter() - start
                if elapsed + elapsed / step > budget_s:
                    log.info("time box: %d of %d inner steps fit in %.1f s", step, cfg.steps,
                             budget_s)  # fmt: skip
                    break
            batch = rows[step * cfg.batch_size : (step + 1) * cfg.batch_size].to(self.device)
            for group in opt.param_groups:
                group["lr"] = self._lr_at(self.global_step)
            with torch.autocast(
                self.device.type, torch.bfloat16, enabled=autocast_bf16(self.device)
            ):
                _, loss = self.model(batch[:, :-1], batch[:, 1:])
            assert loss is not None
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            opt.step()
            value = float(loss.detach())
            if math.isnan(value):
                raise TrainerError(f"inner loss became NaN at step {step}: lower the inner lr")
            result.steps += 1
            self.global_step += 1
            result.tokens += batch.shape[0] * (batch.shape[1] - 1)
            result.losses.append(value)
            if on_step is not None:
                elapsed = time.perf_counter() - start
                tps = result.tokens / max(elapsed, 1e-9)
                on_step(StepInfo(step + 1, value, tps, of=cfg.steps, elapsed_s=elapsed))
            if on_boundary is not None and (step + 1) % trace_interval == 0:
                on_boundary(step + 1)
        if on_boundary is not None and result.steps % trace_interval != 0:
            on_boundary(result.steps)  # the last boundary: after the last step run
        result.seconds = time.perf_counter() - start
        return result
