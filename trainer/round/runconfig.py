"""Where a round's hyper-parameters come from: the chain's TrainingConfig, or a fixed value.

A node reads its :class:`RunConfig` at the start of every round, at the block its signed round-open
names (trainer/round/agreement.py), so a governance change executed before round r
opened is what round r trains with (and its ``configVersion`` is what the node attests).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.errors import ConfigError
from reference.inner import CARRY_STATE, InnerConfig
from reference.outer import OuterConfig
from reference.settings import TrainingSettings
from trainer.network.comm import check_format
from trainer.round.diloco import RoundSettings

# The governed defaults: what TrainingConfig's constructor sets (contracts/src/TrainingConfig.sol,
# checked by tests/trainer/test_governed_defaults.py), what a node runs without a chain and what
# bench.diloco measures (chosen there on the validation half: docs/trainer.md, "Benchmark").
INNER_STEPS = 50
INNER_LR = 3e-3
# Inner steps between two committed boundary states of a round (the attestation's traceRoot,
# reference/trace.py): H / 10
TRACE_INTERVAL = 5
OUTER_LR = 0.9
OUTER_MOMENTUM = 0.9
# Rows per inner step: a node's own setting, not governed (it depends on the node's memory), and
# what `coloco node run --batch-size` and bench.network default to.
NODE_BATCH_SIZE = 8
# Fields of the round's settings that each node chooses for itself (left out of the governed hash)
_NODE_LOCAL = {"settings": ("keep_inner_state",), "inner": ("batch_size",)}


@dataclass(frozen=True)
class RunConfig:
    """One round's settings as read from the run's TrainingConfig."""

    version: int
    settings: RoundSettings
    mixture: tuple[int, ...]
    data_root: bytes | None = None
    """The run's data by content (``TrainingConfig.dataRoot``); None: not pinned (offline)."""

    def governed(self) -> dict[str, Any]:
        """What the round trains with, minus what is the node's own (its batch size, whether it
        keeps its inner AdamW state): the values round members compare by hash
        (reference.settings.governed_hash). Derived from the fields, never listed."""
        values = dataclasses.asdict(self)
        for name in _NODE_LOCAL["settings"]:
            values["settings"].pop(name)
        for name in _NODE_LOCAL["inner"]:
            values["settings"]["inner"].pop(name)
        if self.data_root is not None:
            values["data_root"] = "0x" + self.data_root.hex()
        return values

    @classmethod
    def from_settings(
        cls, governed: TrainingSettings, *, batch_size: int, keep_inner_state: bool = CARRY_STATE
    ) -> RunConfig:
        """The round's settings from the chain's (real values of the ``*_e6`` fields), the inner
        AdamW state fresh each round or carried (``keep_inner_state``, the protocol's
        ``reference.inner.CARRY_STATE`` unless a run's code says otherwise)."""
        if governed.inner_steps <= 0:
            raise ConfigError(
                f"TrainingConfig.innerSteps is {governed.inner_steps}: must be positive"
            )
        return cls.make(
            version=governed.version,
            inner_steps=governed.inner_steps,
            inner_lr=governed.inner_lr,
            trace_interval=governed.trace_interval,
            batch_size=batch_size,
            outer_lr=governed.outer_lr,
            outer_momentum=governed.outer_momentum,
            wire_format=governed.wire_format.label,
            mixture=governed.data_mixture_bps or (10_000,),
            data_root=bytes(governed.data_root),
            keep_inner_state=keep_inner_state,
        )

    @classmethod
    def make(
        cls,
        *,
        version: int = 0,
        inner_steps: int = 10,
        inner_lr: float = INNER_LR,
        trace_interval: int = TRACE_INTERVAL,
        batch_size: int = NODE_BATCH_SIZE,
        outer_lr: float = OUTER_LR,
        outer_momentum: float = OUTER_MOMENTUM,
        wire_format: str = "fp32",
        mixture: tuple[int, ...] = (10_000,),
        data_root: bytes | None = None,
        keep_inner_state: bool = CARRY_STATE,
    ) -> RunConfig:
        settings = RoundSettings(
            inner=InnerConfig(steps=inner_steps, lr=inner_lr, batch_size=batch_size),
            outer=OuterConfig(lr=outer_lr, momentum=outer_momentum),
            wire_format=check_format(wire_format),
            trace_interval=trace_interval,
        ).with_inner_state(keep_inner_state)
        if sum(mixture) != 10_000:
            raise ConfigError(f"data mixture must sum to 10000 bps, got {list(mixture)}")
        return cls(version, settings, tuple(mixture), data_root)


class ConfigSource(Protocol):
    def head(self) -> int:
        """The newest block this source can read (0 for a fixed config)."""
        ...

    def read(self, block: int | None = None) -> RunConfig:
        """The config in force at ``block`` (None: the newest)."""
        ...


class StaticConfig:
    """A fixed config (tests, offline runs)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config

    def head(self) -> int:
        return 0

    def read(self, block: int | None = None) -> RunConfig:
        return self.config


class ChainConfig:
    """``TrainingConfig`` on chain, through :class:`protocol.chain.ChainClient`.

    The per-node batch size is not governed on chain (it depends on the node's memory); it is the
    node's own setting. Everything else comes from the chain.
    """

    def __init__(
        self, chain: Any, *, batch_size: int, keep_inner_state: bool = CARRY_STATE
    ) -> None:
        self.chain = chain
        self.batch_size = batch_size
        self.keep_inner_state = keep_inner_state

    def head(self) -> int:
        return int(self.chain.block_number())

    def read(self, block: int | None = None) -> RunConfig:
        governed = TrainingSettings.read(self.chain, block="latest" if block is None else block)
        return RunConfig.from_settings(
            governed, batch_size=self.batch_size, keep_inner_state=self.keep_inner_state
        )
