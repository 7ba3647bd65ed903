"""Database tables (SQLModel) and the public shapes the API returns.

Bytes are stored as lowercase 0x-hex strings, addresses checksummed. uint64 values that can exceed
a signed 64-bit column (tokens, config version) are only stored once verification bounded them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import WithJsonSchema
from sqlalchemy import BigInteger, Column, DateTime, Dialect, Index, Text, UniqueConstraint, text
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from ledger.core.schemas import JS_SAFE_MAX, Uint64Out
from protocol.attestation import ATTESTATION_SPEC, ComputeAttestation
from protocol.eip712_struct import StructSpec
from protocol.runs import NAME_MAX


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A point in time, always timezone-aware UTC in Python, whatever the database session's zone.

    PostgreSQL stores ``timestamptz`` (an instant; a naive ``timestamp`` column would convert an
    aware value through the session's TimeZone and shift it by hours); SQLite stores the UTC
    wall time and gets its zone back here. A naive value is taken as UTC (``utcnow()`` everywhere).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return moment.replace(tzinfo=None) if dialect.name == "sqlite" else moment

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# --- signed fields as columns ---------------------------------------------------------------------

HEX_LENGTH = {"bytes32": 66, "address": 42}
"""Characters of a stored bytes32 (0x + 64 lowercase hex digits) and address (checksummed)."""


def signed_column(spec: StructSpec, attr: str, **options: Any) -> Any:
    """The column of field ``attr`` of ``spec``, typed by its Solidity type: a bytes32 or an
    address as its 0x-hex string (:data:`HEX_LENGTH`), a uint as BIGINT (a uint64 is stored only
    once the intake bounded it below 2^63). ``options``: an index, for example."""
    sol = next(sol for a, _, sol in spec.fields if a == attr)
    if sol in HEX_LENGTH:
        return Field(max_length=HEX_LENGTH[sol], **options)
    return Field(sa_type=BigInteger, **options)


def check_signed_columns(model: type[SQLModel], table: Any, spec: StructSpec) -> None:
    """``model`` declares ``spec``'s fields first, in struct order, each with the Python type of
    its Solidity type (a uint that can pass 2^53 with the wallet-safe JSON type
    :data:`~ledger.core.schemas.Uint64Out`), and ``table`` has their columns. The fields are
    written out for the type checker; this holds them to the one definition at import."""
    declared = list(model.model_fields.items())[: len(spec.fields)]
    expected = [attr for attr, _, _ in spec.fields]
    if [name for name, _ in declared] != expected:
        raise TypeError(
            f"{model.__name__} declares {[name for name, _ in declared]} first: declare "
            f"{spec.primary}'s fields {expected}, in that order"
        )
    for (attr, _, sol), (_, info) in zip(spec.fields, declared, strict=True):
        kind = str if sol in HEX_LENGTH else int
        wallet = kind is int and (1 << int(sol.removeprefix("uint") or "256")) - 1 > JS_SAFE_MAX
        column = table.c[attr].type
        if (
            info.annotation is not kind
            or wallet != any(isinstance(m, WithJsonSchema) for m in info.metadata)
            or (kind is str and getattr(column, "length", None) != HEX_LENGTH[sol])
            or (kind is int and not isinstance(column, BigInteger))
        ):
            raise TypeError(
                f"{model.__name__}.{attr} is {spec.primary}'s {sol}: declare it "
                f"{'Uint64Out' if wallet else kind.__name__} = signed_column(spec, {attr!r})"
            )


_STORED = tuple((attr, sol == "bytes32") for attr, _, sol in ATTESTATION_SPEC.fields)


def stored_fields(att: ComputeAttestation) -> dict[str, Any]:
    """The signed fields of ``att`` as the attestation table stores them: bytes32 as
    lowercase 0x-hex, the address and the integers as they are (the intake's rows)."""
    row: dict[str, Any] = {}
    for attr, hexed in _STORED:
        value = getattr(att, attr)
        row[attr] = "0x" + value.hex() if hexed else value
    return row


# --- attestations ---------------------------------------------------------------------------------


def _signed(attr: str, **options: Any) -> Any:
    return signed_column(ATTESTATION_SPEC, attr, **options)


class AttestationBase(SQLModel):
    """The ComputeAttestation's signed fields, one column each, in ``ATTESTATION_SPEC``'s order
    and typed by it (held to it at import: :func:`check_signed_columns`)."""

    run_id: str = _signed("run_id")  # indexed by uq_attestation_slot's first column
    round: Uint64Out = _signed("round")
    node: str = _signed("node")  # indexed with the id: ix_attestation_node_id
    config_version: Uint64Out = _signed("config_version")
    base_checkpoint: str = _signed("base_checkpoint")
    pseudo_gradient: str = _signed("pseudo_gradient", index=True)  # BlobStore.hidden
    data_shard: str = _signed("data_shard")
    inner_steps: int = _signed("inner_steps")
    tokens: Uint64Out = _signed("tokens")
    result_checkpoint: str = _signed("result_checkpoint")
    trace_root: str = _signed("trace_root")  # the round's boundary states (reference.trace)


class Attestation(AttestationBase, table=True):
    """An attestation that passed level 0; levels 1-2 fill the score columns at round close."""

    __table_args__ = (
        UniqueConstraint("run_id", "round", "node", name="uq_attestation_slot"),
        # a node's or a payout's newest rows read from the index in id order, not all of its
        # rows sorted (their cost grew with history), and a node's rounds worked counted from
        # an index of verified rows only (migration 0009)
        Index("ix_attestation_node_id", "node", "id"),
        Index("ix_attestation_payout_id", "payout", "id"),
        Index(
            "ix_attestation_node_verified",
            "node",
            postgresql_where=text("verified IS TRUE"),
            sqlite_where=text("verified IS TRUE"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    digest: str = Field(max_length=66, unique=True)
    signature: str = Field(max_length=132)
    members: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    commits: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """The members' signed packet commitments the node averaged (JSON list of wire messages)."""
    received_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    payout: str | None = Field(default=None, max_length=42)  # ix_attestation_payout_id
    verified: bool | None = None
    verified_tokens: int | None = Field(default=None, sa_type=BigInteger)
    quality: float | None = None
    reward: str | None = Field(default=None, max_length=80)
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


check_signed_columns(AttestationBase, Attestation.__table__, ATTESTATION_SPEC)  # type: ignore[attr-defined]


class AttestationPublic(AttestationBase):
    id: int
    digest: str
    payout: str | None  # public on chain (StakeManager); lets anyone rebuild the rewards trees
    received_at: datetime
    verified: bool | None
    verified_tokens: Uint64Out | None
    quality: float | None
    reward: str | None
    reason: str | None


class Rejection(SQLModel, table=True):
    """Audit trail: every attestation refused, with the check that refused it."""

    __table_args__ = (Index("ix_rejection_node_id", "node", "id"),)  # a node's newest

    id: int | None = Field(default=None, primary_key=True)
    node: str | None = Field(default=None, max_length=42)
    run_id: str | None = Field(default=None, max_length=66)
    round: str | None = Field(default=None, max_length=24)
    code: str = Field(max_length=64)
    message: str = Field(sa_column=Column(Text, nullable=False))
    digest: str | None = Field(default=None, max_length=66)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class RejectionPublic(SQLModel):
    run_id: str | None
    round: str | None
    code: str
    message: str
    digest: str | None
    created_at: datetime


class Join(SQLModel, table=True):
    """A node's signed join of a round, recorded before the round started (its membership)."""

    __tablename__ = "round_join"
    __table_args__ = (
        UniqueConstraint("run_id", "round", "node", name="uq_round_join"),
        Index("ix_round_join_node", "node", "id"),  # a node's joins, newest first (missed rounds)
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=66, index=True)
    round: int = Field(sa_type=BigInteger)
    node: str = Field(max_length=42)
    signature: str = Field(max_length=132)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


STATE_REQUEST = -1
"""``BoundaryRequest.at_step`` of a request for a committed boundary's full state."""
SKETCH_REQUEST = -2
"""``BoundaryRequest.at_step`` of a request for a committed boundary's sketch only
(reference.sketch: a few KiB, checked against the leaf's sketch hash)."""


class BoundaryRequest(SQLModel, table=True):
    """The ledger asked node ``node`` for boundary ``index`` of its trace of ``round`` (an audit):
    ``pending`` until the node delivers a state that hashes to its committed leaf
    (``delivered``, with the blob) or the deadline passes (``missed``: the node fails the audit,
    ledger.judge.boundaries)."""

    __tablename__ = "boundary_request"
    __table_args__ = (
        UniqueConstraint(
            "run_id", "round", "node", "boundary", "at_step", name="uq_boundary_request"
        ),
        Index("ix_boundary_request_node_state", "node", "state"),  # a node's open requests
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=66)
    round: int = Field(sa_type=BigInteger)
    node: str = Field(max_length=42)
    boundary: int = Field(sa_type=BigInteger)
    at_step: int = Field(
        default=-1, sa_column=Column(BigInteger, nullable=False, server_default="-1")
    )
    """-1 (:data:`STATE_REQUEST`): the committed boundary ``boundary``'s state; -2
    (:data:`SKETCH_REQUEST`): its sketch only; else the node's state after ``at_step`` inner
    steps, inside the segment after boundary ``boundary`` (a bisection's probe,
    ledger.judge.bisect: no leaf commits it, the node recomputes it from that boundary)."""
    trace_root: str = Field(max_length=66)
    deadline: datetime = Field(sa_type=UtcDateTime)
    state: str = Field(default="pending", max_length=16)
    step: int | None = Field(default=None, sa_type=BigInteger)
    state_hash: str | None = Field(default=None, max_length=66)
    sketch_hash: str | None = Field(default=None, max_length=66)
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    delivered_at: datetime | None = Field(default=None, sa_type=UtcDateTime)


class FraudRecord(SQLModel, table=True):
    """A failed replay audit: the evidence, and the reward it withheld (never claimable)."""

    __tablename__ = "fraud_record"
    __table_args__ = (UniqueConstraint("run_id", "round", "node", name="uq_fraud_record"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=66, index=True)
    round: int = Field(sa_type=BigInteger)
    node: str = Field(max_length=42, index=True)
    digest: str = Field(max_length=66)
    evidence_hash: str = Field(max_length=66)
    evidence: str = Field(sa_column=Column(Text, nullable=False))
    withheld: str = Field(default="0", max_length=80)
    slash_tx: str | None = Field(default=None, max_length=66)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


class SegmentBisection(SQLModel, table=True):
    """A failed segment of a node's round bisected to one step (ledger.judge.bisect): the
    interval ``lo .. hi`` still holding the first differing step, the probe awaited from the
    node, the node's states by step (JSON ``{step: state hash}``), and once ``done`` the one-step
    verdict's evidence (reference.verdict) beside the round's fraud record."""

    __tablename__ = "segment_bisection"
    __table_args__ = (UniqueConstraint("run_id", "round", "node", name="uq_segment_bisection"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=66, index=True)
    round: int = Field(sa_type=BigInteger)
    node: str = Field(max_length=42, index=True)
    boundary: int = Field(sa_type=BigInteger)
    seg_lo: int = Field(sa_type=BigInteger)
    seg_hi: int = Field(sa_type=BigInteger)
    lo: int = Field(sa_type=BigInteger)
    hi: int = Field(sa_type=BigInteger)
    probe: int | None = Field(default=None, sa_type=BigInteger)
    state: str = Field(default="running", max_length=16)
    states: str = Field(sa_column=Column(Text, nullable=False))
    inputs: str = Field(sa_column=Column(Text, nullable=False))
    evidence: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    evidence_hash: str | None = Field(default=None, max_length=66)
    holds: bool | None = None
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


# --- runs and rounds ------------------------------------------------------------------------------

ROUND_STATES = ("open", "closing", "scored", "committed", "final")


class Run(SQLModel, table=True):
    run_id: str = Field(primary_key=True, max_length=66)
    genesis_checkpoint: str = Field(max_length=66)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    name: str | None = Field(default=None, max_length=NAME_MAX)  # sha256(name) == run_id


class RoundState(SQLModel, table=True):
    """A round of a run as the ledger sees it: open -> closing -> scored -> committed -> final."""

    __tablename__ = "ledger_round"
    __table_args__ = (UniqueConstraint("run_id", "round", name="uq_round"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=66)  # indexed by uq_round's first column
    round: int = Field(sa_type=BigInteger)
    state: str = Field(default="open", max_length=16, index=True)
    opened_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    deadline_at: datetime = Field(sa_type=UtcDateTime)
    closed_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    expected: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    checkpoint: str | None = Field(default=None, max_length=66)
    total_work: str | None = Field(default=None, max_length=80)
    rewards_root: str | None = Field(default=None, max_length=66)
    attestations_root: str | None = Field(default=None, max_length=66)
    reward_per_round: str | None = Field(default=None, max_length=80)
    tx_hash: str | None = Field(default=None, max_length=66)
    block_number: int | None = Field(default=None, sa_type=BigInteger)
    note: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class RoundPublic(SQLModel):
    run_id: str
    round: Uint64Out
    state: str
    opened_at: datetime
    deadline_at: datetime
    closed_at: datetime | None
    members: list[str]
    expected: list[str]
    checkpoint: str | None
    total_work: str | None
    rewards_root: str | None
    attestations_root: str | None
    tx_hash: str | None
    block_number: int | None
    note: str | None
    scores: list[AttestationPublic]


class Settlement(SQLModel, table=True):
    """Intent to commit a round, written before the transaction is sent (crash-safe resend)."""

    __table_args__ = (UniqueConstraint("run_id", "round", name="uq_settlement"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=66)
    round: int = Field(sa_type=BigInteger)
    rewards_root: str = Field(max_length=66)
    checkpoint: str = Field(max_length=66)
    total_work: str = Field(max_length=80)
    attestations_root: str = Field(max_length=66)
    tree: str = Field(sa_column=Column(Text, nullable=False))
    leases: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """ComputeLeases leaves folded into the same root: JSON [[lease id, cumulative wei, through
    round], ...] (ledger/chain/leases.py; NULL: none)."""
    nonce: int | None = Field(default=None, sa_type=BigInteger)
    tx_hash: str | None = Field(default=None, max_length=66)
    raw_tx: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    block_number: int | None = Field(default=None, sa_type=BigInteger)
    status: str = Field(default="intent", max_length=16)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


# --- chain index ----------------------------------------------------------------------------------


class Node(SQLModel, table=True):
    """A StakeManager node key as of the indexer's last refresh. ``node_id`` is the contract's
    stable node identity: a key rotation gives the node a new key (a new row) under the same id,
    and retires the old key (``registered`` false, its history kept under the same id)."""

    address: str = Field(primary_key=True, max_length=42)
    operator: str = Field(max_length=42)
    payout: str = Field(max_length=42)
    staked: str = Field(max_length=80)
    unbonding: str = Field(max_length=80, default="0")
    registered: bool = True
    updated_block: int = Field(sa_type=BigInteger)
    node_id: int | None = Field(default=None, sa_type=BigInteger, index=True)


class ChainCommit(SQLModel, table=True):
    """A RoundCommitted event seen on chain."""

    __table_args__ = (UniqueConstraint("run_id", "round", name="uq_chain_commit"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=66)  # indexed by uq_chain_commit's first column
    round: int = Field(sa_type=BigInteger)
    rewards_root: str = Field(max_length=66)
    checkpoint: str = Field(max_length=66)
    total_work: str = Field(max_length=80)
    attestations_root: str = Field(max_length=66)
    block_number: int = Field(sa_type=BigInteger)
    tx_hash: str = Field(max_length=66)
    # the root's finality: claimable from ``finalized_at`` (unix seconds, the end of its dispute
    # window) unless revoked first (``revoked_block``: the RootRevoked event's block)
    finalized_at: int | None = Field(default=None, sa_type=BigInteger)
    revoked_block: int | None = Field(default=None, sa_type=BigInteger)


class KeyValue(SQLModel, table=True):
    """Small durable state: the indexer cursor, the cached TrainingConfig."""

    key: str = Field(primary_key=True, max_length=64)
    value: str = Field(sa_column=Column(Text, nullable=False))


class Blob(SQLModel, table=True):
    hash: str = Field(primary_key=True, max_length=66)
    size: int = Field(sa_type=BigInteger)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    uploader: str | None = Field(default=None, max_length=42, index=True)  # counts on its quota


class PayoutTotal(SQLModel, table=True):
    """Everything scored so far per payout address (wei, as a decimal string): the rewards
    tree's amounts, kept up to date by scoring so a settlement never re-reads the history."""

    __tablename__ = "payout_total"

    payout: str = Field(primary_key=True, max_length=42)
    amount: str = Field(max_length=80)


class FundingEvent(SQLModel, table=True):
    """A RunFunding or CodeRegistry event seen on chain (ledger/chain/funding_index.py): receipts of
    the capital and code kinds and the ETH roots are served from these rows, never over RPC.

    ``run_id``, ``account`` (backer, contributor, claimant), ``ref`` (a contribution id or an ETH
    root) and ``amount`` are lifted out of the event for lookups; ``args`` holds every argument.
    ``running`` is a per-run running sum kept at insert, in chain order: for ``Deposited`` the
    run's sum of amount x block time (the capital weight), for ``EthClaimed`` the run's wei paid.
    """

    __tablename__ = "funding_event"
    __table_args__ = (
        UniqueConstraint("tx_hash", "log_index", name="uq_funding_event"),
        Index("ix_funding_event_run_name", "run_id", "name"),
    )

    id: int | None = Field(default=None, primary_key=True)
    contract: str = Field(max_length=32)
    name: str = Field(max_length=40)
    run_id: str | None = Field(default=None, max_length=66)
    account: str | None = Field(default=None, max_length=42, index=True)
    ref: str | None = Field(default=None, max_length=80, index=True)
    amount: str | None = Field(default=None, max_length=80)
    running: str | None = Field(default=None, max_length=100)
    args: str = Field(sa_column=Column(Text, nullable=False))
    block_number: int = Field(sa_type=BigInteger, index=True)
    block_time: int = Field(sa_type=BigInteger)
    log_index: int
    tx_hash: str = Field(max_length=66)


# --- the compute market ---------------------------------------------------------------------------


class MarketOffer(SQLModel, table=True):
    """A node's signed ComputeOffer (protocol/offer.py) as accepted (ledger/market/offers.py).

    One row per node, its offer with the highest nonce: a newer nonce replaces it (so the table
    holds at most one row per registered node, and an older signed offer, its nonce below the
    row's, is refused as a replay). One column per signed field (bytes32 as 0x-hex, the price in
    wei as its decimal string, the uint64 fields once the intake bounded them below 2^63).
    ``operator``: the node's operator when it was posted (providers are grouped by it);
    ``verified``: its ``challenge`` matched a recorded hardware challenge of this node.
    """

    __tablename__ = "market_offer"
    # a replacing offer gets an id above every one before, never a deleted one's (SQLite reuses
    # the highest rowid without AUTOINCREMENT): readers tell a changed table by its highest id
    __table_args__ = {"sqlite_autoincrement": True}

    id: int | None = Field(default=None, primary_key=True)
    digest: str = Field(max_length=66, unique=True)
    node: str = Field(max_length=42, unique=True)
    operator: str = Field(max_length=42)
    device_kind: str = Field(max_length=66)
    device_count: int = Field(sa_type=BigInteger)
    memory_bytes: int = Field(sa_type=BigInteger)
    flops: int = Field(sa_type=BigInteger)
    bandwidth: int = Field(sa_type=BigInteger)
    region: str = Field(max_length=66)
    price_per_device_hour: str = Field(max_length=80)
    min_hours: int = Field(sa_type=BigInteger)
    expiry: int = Field(sa_type=BigInteger)
    nonce: int = Field(sa_type=BigInteger)
    challenge: str = Field(max_length=66)
    signature: str = Field(max_length=132)
    verified: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)


# --- market: hardware challenges ------------------------------------------------------------------


class MarketChallenge(SQLModel, table=True):
    """A node's timed hardware challenge (reference/challenge.py): what it claimed, what it was
    given, and the verdict with what it measured (what an offer carries). Migration 0015."""

    __tablename__ = "market_challenge"

    id: int | None = Field(default=None, primary_key=True)
    node: str = Field(max_length=42, index=True)
    request: str = Field(max_length=66, unique=True)  # the signed claim's digest: no replay
    kind: str = Field(max_length=8)
    devices: int
    memory_bytes: int = Field(sa_type=BigInteger)  # claimed, per device
    flops: int = Field(sa_type=BigInteger)  # claimed FLOP/s, per device
    n: int
    m: int
    seed: str = Field(max_length=66)
    secret: str = Field(max_length=66)  # probe keys derive from it: never served
    slack: float
    issued_at: datetime = Field(default_factory=utcnow, sa_type=UtcDateTime)
    deadline_at: datetime = Field(sa_type=UtcDateTime)
    verdict: str = Field(default="open", max_length=8, index=True)  # open, passed, failed
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    measured_flops: int | None = Field(default=None, sa_type=BigInteger)  # all devices, FLOP/s
    measured_memory_bytes: int | None = Field(default=None, sa_type=BigInteger)  # per device
    measured_devices: int | None = None
    decided_at: datetime | None = Field(default=None, sa_type=UtcDateTime)


class MarketChallengeDevice(SQLModel, table=True):
    """One device's nonce, commitment (Merkle root of C, and when it arrived) and verdict."""

    __tablename__ = "market_challenge_device"
    __table_args__ = (
        UniqueConstraint("challenge_id", "device", name="uq_market_challenge_device"),
    )

    id: int | None = Field(default=None, primary_key=True)
    challenge_id: int
    device: int
    nonce: str = Field(max_length=66)
    root: str | None = Field(default=None, max_length=66)
    committed_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    verdict: str = Field(default="open", max_length=8)  # open, committed, passed, failed
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
