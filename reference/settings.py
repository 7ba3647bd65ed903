"""The governed training settings: TrainingConfig's struct, once, in Python.

:class:`TrainingSettings` is the one list of the run's governed settings: ``version()`` then the
members of ``ITrainingConfig.Config`` (contracts/src/interfaces/ITrainingConfig.sol), in the
struct's order, each named as the ABI names it in snake case (``innerLrE6`` -> ``inner_lr_e6``).
Everything else is derived from that list rather than typed again:

- the chain decode (:meth:`TrainingSettings.read`): ``current()``'s values by their ABI names
  (protocol.abi_struct), refused when the ABI and this class disagree on a single field;
- the JSON form (:meth:`~TrainingSettings.to_json`, :meth:`~TrainingSettings.from_json`), from the
  fields' types, refusing unknown and missing keys (the ledger's indexer stores it);
- the governed hash (:func:`governed_hash`): keccak256 of a canonical JSON form;
- the real values of the fixed-point fields (:func:`from_e6`; ``inner_lr`` for ``inner_lr_e6``).

:class:`WireFormat` is the one definition of the wire formats: its value is the chain's code
(``TrainingConfig.wireFormat``), its :attr:`~WireFormat.label` the name flags and JSON use. An
unknown code from the chain is an error that names it, never a silent fp32.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Self

from protocol.abi_struct import as_dataclass
from protocol.coordination import canonical_json
from protocol.eip712 import keccak256
from protocol.errors import ConfigError
from protocol.types import Bytes32, TokenUnits, Wei

if TYPE_CHECKING:
    from protocol.chain_views import ChainViews

E6 = 1_000_000
"""TrainingConfig keeps real numbers (learning rates, momentum) in millionths: ``*_e6`` fields."""


def from_e6(value: int) -> float:
    """A ``*_e6`` field's real value: ``3000`` -> ``0.003``."""
    return value / E6


def to_e6(value: float | str | Decimal, *, name: str = "value") -> int:
    """``0.003`` -> ``3000``; ConfigError for a value with more than 6 decimal places."""
    try:
        exact = Decimal(str(value)) * E6
    except InvalidOperation as exc:
        raise ConfigError(f"{name}={value!r}: expected a number like 0.001") from exc
    if exact != exact.to_integral_value():
        raise ConfigError(f"{name}={value!r}: at most 6 decimal places")
    return int(exact)


class WireFormat(IntEnum):
    """How a pseudo-gradient travels on the wire (values equal `TrainingConfig.wireFormat`)."""

    FP32 = 0
    BF16 = 1
    INT8 = 2
    SPARSE = 3
    """Per-chunk top-k with 2-bit values and error feedback (reference.codec.sparse: the shape
    is ``SPARSE_SPEC``, the residual node state)."""

    @property
    def label(self) -> str:
        """The format's name as flags, JSON and the trainer spell it: "fp32", "bf16", "int8",
        "sparse"."""
        return self.name.lower()

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        return tuple(f.label for f in cls)

    @classmethod
    def codes(cls) -> str:
        """The chain's codes with their names: "0 (fp32), 1 (bf16), 2 (int8) or 3 (sparse)"."""
        known = [f"{f.value} ({f.label})" for f in cls]
        return f"{', '.join(known[:-1])} or {known[-1]}"

    @classmethod
    def parse(cls, value: WireFormat | int | str) -> WireFormat:
        """Accept a `WireFormat`, its chain number (0-3) or its name ("fp32", ..., "sparse")."""
        if isinstance(value, WireFormat):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ConfigError(
                    f"unknown wire format {value!r}: use one of {', '.join(cls.labels())}"
                ) from None
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                raise ConfigError(
                    f"unknown wire format number {value}: TrainingConfig.wireFormat must be "
                    f"{cls.codes()}"
                ) from None
        raise ConfigError(
            f"wire format must be a WireFormat, int or str, got {type(value).__name__}"
        )


@dataclass(frozen=True)
class TrainingSettings:
    """``TrainingConfig.version()`` and ``current()``, with Python names and types."""

    version: int
    inner_steps: int
    inner_lr_e6: int
    trace_interval: int
    outer_lr_e6: int
    outer_momentum_e6: int
    wire_format: WireFormat
    max_nodes: int
    min_stake: Wei
    reward_per_round: TokenUnits
    data_mixture_bps: tuple[int, ...]
    data_root: Bytes32
    released_checkpoint: Bytes32
    released_checkpoint_uri: str

    @property
    def inner_lr(self) -> float:
        return from_e6(self.inner_lr_e6)

    @property
    def outer_lr(self) -> float:
        return from_e6(self.outer_lr_e6)

    @property
    def outer_momentum(self) -> float:
        return from_e6(self.outer_momentum_e6)

    def reals(self) -> dict[str, float]:
        """Every fixed-point field's real value, named without its ``_e6``."""
        return {
            f.name.removesuffix("_e6"): from_e6(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name.endswith("_e6")
        }

    # --- the chain ----------------------------------------------------------------------------

    @classmethod
    def from_chain(cls, version: int, current: Mapping[str, Any]) -> Self:
        """From ``version()`` and ``current()`` by ABI name (protocol.abi_struct.returned)."""
        values = dict(current)
        code = values.get("wireFormat")
        if code is not None:
            if int(code) not in set(WireFormat):
                raise ConfigError(
                    f"the chain's TrainingConfig.wireFormat is {code}, a wire format this coloco "
                    f"does not know (it knows {WireFormat.codes()}): upgrade coloco to join "
                    "this run"
                )
            values["wireFormat"] = WireFormat(int(code))
        return as_dataclass(cls, values, where="TrainingConfig.current()", version=int(version))

    @classmethod
    def read(cls, chain: ChainViews, *, block: int | str = "latest") -> Self:
        """The live settings, or those in force at ``block`` (a number, or a tag like "latest")."""
        view = chain.training_config
        return cls.from_chain(view.version(block=block), view.current(block=block))

    # --- JSON ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """JSON-ready values by field name: wire format by label, bytes as 0x hex, tuples as
        lists."""
        return {f.name: _to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The inverse of :meth:`to_json`; ConfigError naming unknown or missing keys."""
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown, missing = sorted(set(data) - set(names)), sorted(set(names) - set(data))
        if unknown or missing:
            raise ConfigError(
                f"training settings JSON: unknown keys {unknown}, missing keys {missing}"
            )
        values: dict[str, Any] = {n: _from_json(hints[n], data[n], n) for n in names}
        return cls(**values)

    def governed_hash(self) -> str:
        return governed_hash(self.to_json())


def governed_hash(values: Mapping[str, Any]) -> str:
    """keccak256 of governed values in canonical JSON (sorted keys, no spaces), as hex: what
    round members compare to know they read the same settings."""
    return keccak256(canonical_json(dict(values))).hex()


def _to_json(value: object) -> object:
    if isinstance(value, WireFormat):
        return value.label
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, tuple):
        return list(value)
    return value


def _from_json(hint: Any, value: Any, name: str) -> object:
    base = getattr(hint, "__supertype__", hint)  # NewType (Wei, Bytes32, ...) -> int, bytes
    try:
        if base is WireFormat:
            return WireFormat.parse(value)
        if typing.get_origin(base) is tuple:
            return tuple(int(v) for v in value)
        if base is bytes:
            return bytes.fromhex(str(value).removeprefix("0x"))
        return base(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"training settings JSON: {name}={value!r} is not a {hint}") from exc
