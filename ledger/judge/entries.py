"""What the verdicts of a round share: one :class:`Entry` per attestation (the check that failed
it, its evidence, its tensors, quality, credited tokens and reward), the round's
:class:`Context` (settings, blobs, the governed config, the committed base) and the
:class:`Judgement` the entry point returns (:func:`ledger.judge.verdicts.judge_round`).

Each stage of :mod:`ledger.judge.verdicts` takes the entries and marks them: the first failed
check is the one a receipt names (:meth:`Entry.fail`), later checks skip failed entries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import torch

from ledger.core.blobstore import BlobStore
from ledger.core.config import Settings
from ledger.core.models import Attestation
from ledger.judge.tensors import Tensors, UsefulnessFn
from reference.settings import TrainingSettings

if TYPE_CHECKING:
    from sqlmodel import Session

    from ledger.judge.bisect import Ask
    from protocol.eip712 import Eip712Domain
    from reference.codec import Packet


@dataclass
class Fraud:
    """A failed replay audit (:mod:`ledger.judge.audits`): its evidence as canonical JSON, the
    keccak of that text, and the reward it would have earned (:mod:`ledger.judge.rewards`)."""

    evidence: str
    evidence_hash: str
    withheld: str = "0"


@dataclass
class Entry:
    att: Attestation
    check: str | None = None
    reason: str = ""
    tensors: Tensors | None = None
    flat: torch.Tensor | None = None
    quality: float = 0.0
    tokens: int = 0
    suspicious: list[str] = field(default_factory=list)
    packet: Packet | None = (
        None  # the all-reduce packet of a commitment blob (reference.commitment)
    )
    unhelpful: str | None = None  # usefulness <= 0 while the audit can replay: it decides
    replayed: bool = False  # the replay audit matched
    reward: int = 0
    fraud: Fraud | None = None
    excused: str | None = None
    """Why the result check cannot hold this entry to the ledger's step (a member of its group
    equivocated on its packet: :mod:`ledger.judge.commits`)."""

    def fail(self, check: str, reason: str) -> None:
        if self.check is None:
            self.check, self.reason = check, f"[{check}] {reason}"

    @property
    def ok(self) -> bool:
        return self.check is None

    @property
    def id(self) -> int:
        return self.att.id or 0


@dataclass
class Judgement:
    entries: list[Entry]
    checkpoint: str | None
    note: str
    audit_cpu_s: float = 0.0
    probe_cpu_s: float = 0.0  # the first-step probe (level 2; a replay is audit_cpu_s)


@dataclass
class Context:
    settings: Settings
    blobs: BlobStore
    config: TrainingSettings
    base: str
    last_round: int
    members: frozenset[str] | None
    usefulness: UsefulnessFn | None
    start_of: Callable[[Attestation], datetime]  # when the node could start the round's work
    model: Tensors | None = None  # the base checkpoint's tensors (set by judge_round)
    domain: Eip712Domain | None = None  # the chain's: members' signed commits are checked in it
    leased: Mapping[str, float] = field(default_factory=dict)
    """Offered FLOP/s of the nodes leased in the round (lower-case address): their attested rate
    is checked against it (:func:`ledger.judge.throughput.check_leased`)."""
    configs: Mapping[int, TrainingSettings] = field(default_factory=dict)
    """Every TrainingConfig version the indexer read, by version. ``config`` is the round's:
    the version most of its attestations sign (:func:`ledger.judge.claims.round_config`), not
    the one in force when the ledger scores it; round r-1's attestations are read under their
    own (:meth:`config_of`)."""
    probes: Callable[[Session], Ask] | None = None
    """How the audit asks a node for its states inside a segment that failed the replay (the
    intake's ``ask_probe``, passed in by the round keeper: the judge does not import the
    intake); None: no one-step verdict can be asked, a failed segment fails the node at once."""

    def config_of(self, att: Attestation) -> TrainingSettings:
        """The settings ``att`` was trained under: its signed version's (the round's when it is
        not one the ledger read: level 1 already failed such an entry of this round)."""
        if att.config_version == self.config.version:
            return self.config
        return self.configs.get(att.config_version, self.config)


def can_audit(ctx: Context) -> bool:
    """Whether replays can run: a sampled fraction and the model preset to replay with."""
    return ctx.settings.audit_fraction > 0 and ctx.settings.usefulness_model is not None
