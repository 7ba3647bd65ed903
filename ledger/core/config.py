"""Ledger settings: one typed object, from the environment (``COLOCO_LEDGER_*``) or a .env file.

Safe by default: the environment is ``production`` unless told otherwise, where secrets (the
committer keystore and its password, the admin token) must be set and unsafe values (the
well-known development token, a raw private key, an in-memory database, auto-created schema)
are refused with a message saying which setting to fix. ``development`` (the demo) and ``test``
must be asked for explicitly; only ``development`` accepts the development admin token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ledger.core import secrets
from protocol.errors import ConfigError

Environment = Literal["development", "test", "production"]

DEV_ADMIN_TOKEN = "development-admin-token"
# sparse packets: honest nodes keep 11-16 % of the same positions (random choice: 6.25 %), a copy
# of another's update keeps 31 % with noise of half its norm, 39 % rescaled (bench.sparse_overlap,
# tiny model, 4 nodes; Templar flags 40 % at its own shape)
COPY_INDEX_OVERLAP = 0.25
# the relative L2 error a replay may show: an honest node replayed on other kernels (thread
# count, CPU) reached 2.5e-3, one of 8-12 inner steps skipped 0.073 (docs/ledger.md)
AUDIT_TOLERANCE = 1e-2
# the segment audit (docs/ledger.md, "Segment audit"): reference.segment.segment_error of a
# segment of k = H/10 steps replayed from the node's own committed state. `python -m bench.audit
# --quick`: 320 honest segments of nodes on 2 threads, worst 6.9e-5 (cpu10m, H 50; tiny 3.2e-6);
# smallest cheat bf16 for fp32 4.3e-3, one skipped step 0.43
SEGMENT_TOLERANCE = 1e-3
# one step replayed alone from the node's own state (the bisection's unit, the verdict that
# decides): the geometric middle of the worst honest GPU step, 4.7e-5 (cpu10m, H 50, pinned fp32
# on an H200 re-checked on the CPU; docs/ledger.md), and the nearest cheat, a bf16-autocast step
# claimed as fp32, 1.3e-3: 5x above the one, 5x below the other (honest CPU steps: 5e-7)
ONE_STEP_TOLERANCE = 2.5e-4
# segments replayed per audited node-round; more only add to the chance of catching a cheat
AUDIT_SEGMENTS = 1
# a node answers the ledger's boundary requests every 2 s from a background thread and while it
# lingers after its last one (trainer.round.node): an audited round's verdict waits at most this
# long, and so do the rounds after it, when a node does not answer (withholding fails it)
BOUNDARY_DEADLINE_S = 60.0
# a node's minimum stake valued in its rewards of one round (governance's valuation: minStake at
# the stake's price over one node's share of rewardPerRound at the share token's price)
STAKE_IN_ROUND_REWARDS = 200.0


class Settings(BaseSettings):
    """Everything the ledger service needs to run; validated on construction."""

    model_config = SettingsConfigDict(
        env_prefix="COLOCO_LEDGER_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="forbid",
        frozen=True,
    )

    environment: Environment = "production"
    rpc_url: str = "http://127.0.0.1:8545"
    deployment: Path = Field(
        default=Path("deployments/31337.json"), description="deployment JSON written by deploy"
    )
    committer_keystore: Path | None = Field(
        default=None, description="eth-account keystore JSON of the COMMITTER_ROLE key"
    )
    committer_password_file: Path | None = None
    committer_private_key: SecretStr | None = Field(
        default=None, description="raw committer key; development and tests only"
    )
    slasher_keystore: Path | None = Field(
        default=None,
        description="eth-account keystore of a StakeManager SLASHER_ROLE key: failed audits "
        "become slash proposals (ledger/chain/slash.py); none: fraud records only",
    )
    slasher_password_file: Path | None = None
    slasher_private_key: SecretStr | None = Field(
        default=None, description="raw slasher key; development and tests only"
    )
    slash_bps: int = Field(
        default=1000, ge=1, le=10_000, description="share of the node's stake a fraud proposes"
    )
    database_url: str = "sqlite:///ledger.db"
    sqlite_synchronous: Literal["NORMAL", "FULL"] = Field(
        default="NORMAL",
        description="NORMAL survives a process kill; FULL also a power loss (an fsync a commit)",
    )
    blob_dir: Path = Path("ledger-blobs")
    admin_token: SecretStr = SecretStr(DEV_ADMIN_TOKEN)

    round_deadline_s: float = Field(default=600.0, gt=0)
    round_window: int = Field(default=3, ge=1, le=1_000_000)
    """Rounds ``last_committed+1 .. last_committed+W`` accept attestations and joins. 3, not 2:
    a node on the one-round overlap schedule (trainer.round.overlap) attests round r at the end
    of round r+1 and joins round r+2 right after, while the last committed round can still be
    r-1; with 2 it waited, idle, for round r's commit before every round. (The bounded overlap,
    the node's default, attests round r one segment into round r+1.)"""
    confirmations: int = Field(default=1, ge=0, le=1000)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_blob_bytes: int = Field(default=256 << 20, ge=1024)
    blob_quota_bytes: int = Field(
        default=4 << 30, ge=1024, description="blob bytes one node may store at once"
    )
    blob_uploads_per_node: int = Field(
        default=4, ge=1, le=1024, description="uploads one node may have in flight at once"
    )
    blob_uploads_total: int = Field(
        default=64, ge=1, le=100_000, description="uploads in flight at once, all senders"
    )
    blob_anonymous_bytes: int = Field(
        default=1 << 30,
        ge=1024,
        description="bytes all unsigned uploads (checkpoints a run names) may hold in flight",
    )
    blob_upload_deadline_s: float = Field(
        default=600.0, gt=0, description="an upload's body must arrive within this many seconds"
    )
    blob_min_free_bytes: int = Field(
        default=1 << 30, ge=0, description="uploads are refused when the blob disk has less free"
    )
    blob_gc_grace_s: float = Field(
        default=3600.0, gt=0, description="blobs no round needs are deleted after this age"
    )
    max_batch_items: int = Field(default=1000, ge=1, le=100_000)
    max_tokens_per_s: float = Field(default=5_000_000.0, gt=0)
    indexer_chunk_blocks: int = Field(default=2000, ge=1)
    indexer_poll_s: float = Field(default=1.0, gt=0)
    lifecycle_poll_s: float = Field(default=0.5, gt=0)
    usefulness_model: str | None = Field(
        default="tiny", description="model preset for the own-shard usefulness test (e.g. tiny)"
    )
    usefulness_corpus: Path | None = Field(default=None, description="corpus folder; stdlib")
    usefulness_rows: int = Field(default=32, ge=1, le=4096)
    max_rejections_per_node: int = Field(
        default=1000, ge=1, description="audit trail: newest refusals kept per node"
    )
    api_threads: int = Field(
        default=16, ge=1, le=512, description="threads serving sync routes; the pool follows"
    )
    join_window_s: float = Field(
        default=1.0, gt=0, description="a round starts this long after its first join / r-1"
    )
    tokens_per_step: int | None = Field(
        default=None, ge=1, description="governed batch x sequence length (work is derived)"
    )
    max_batch_rows: int = Field(
        default=64,
        ge=1,
        le=1 << 20,
        description="with TOKENS_PER_STEP unset: the largest batch a node may claim, "
        "tokens <= innerSteps x this x the model's seq_len (else work_mismatch at level 1)",
    )
    copy_cosine: float = Field(default=0.9, gt=0, le=1, description="residual copy threshold")
    copy_history_rounds: int = Field(default=3, ge=0, le=100)
    copy_index_overlap: float = Field(
        default=COPY_INDEX_OVERLAP, gt=0, le=1,
        description="sparse packets: share of kept positions two members share that makes a copy",
    )  # fmt: skip
    magnitude_floor: float = Field(default=0.25, gt=0, description="x median honest norm")
    magnitude_ceiling: float = Field(default=4.0, gt=1, description="x median honest norm")
    audit_fraction: float = Field(
        default=0.1, ge=0, le=1, description="share of verified node-rounds replayed"
    )
    audit_probation_rounds: int = Field(
        default=1, ge=0, description="a node's first verified rounds are always replayed"
    )
    audit_tolerance: float = Field(
        default=AUDIT_TOLERANCE, gt=0, description="replay relative L2 error"
    )
    segment_tolerance: float = Field(
        default=SEGMENT_TOLERANCE, gt=0, description="segment audit: reference.segment error"
    )
    audit_threads: int = Field(
        default=0, ge=0, le=1024,
        description="torch threads of a segment replay; 0: one a core (os.cpu_count())",
    )  # fmt: skip
    boundary_deadline_s: float = Field(
        default=BOUNDARY_DEADLINE_S, gt=0,
        description="seconds a node has to deliver a boundary state an audit asked for",
    )  # fmt: skip
    audit_segments: int = Field(
        default=AUDIT_SEGMENTS, ge=1, le=1000, description="segments replayed per audited round"
    )
    stake_in_round_rewards: float = Field(
        default=STAKE_IN_ROUND_REWARDS,
        gt=0,
        description="the minimum stake valued in one node's rewards of one round: with "
        "SLASH_BPS it sizes the slash the audit's economics weigh (docs/ledger.md)",
    )
    run_background: bool = Field(default=True, description="run indexer + lifecycle in the app")
    auto_create_schema: bool = Field(
        default=False, description="create tables on start (development/test only)"
    )

    @model_validator(mode="after")
    def _refuse_paying_cheats(self) -> Settings:
        """With the audit on, a cheat that skips inner steps must not pay: ``p (1 + S)`` > 1
        (reference.audit_economics), in every environment."""
        from reference.audit_economics import deterrence, slash_in_round_rewards

        if self.audit_fraction <= 0:  # the audit is off, explicitly: nothing is replayed
            return self
        slash = slash_in_round_rewards(self.slash_bps, self.stake_in_round_rewards)
        if deterrence(self.audit_fraction, slash) <= 1.0:
            need = 1.0 / self.audit_fraction - 1.0
            raise ConfigError(
                f"cheating pays at these settings: AUDIT_FRACTION {self.audit_fraction:g} x "
                f"(1 + slash {slash:g} rounds' rewards) = "
                f"{deterrence(self.audit_fraction, slash):.3g} <= 1, so a node that skips a "
                f"round's steps gains more than it expects to lose; raise "
                f"COLOCO_LEDGER_AUDIT_FRACTION, or the slash (COLOCO_LEDGER_SLASH_BPS x "
                f"COLOCO_LEDGER_STAKE_IN_ROUND_REWARDS) above {need:g} rounds' rewards"
            )
        return self

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        if self.environment == "development":
            return self
        problems: list[str] = []
        if self.admin_token.get_secret_value() == DEV_ADMIN_TOKEN:
            problems.append("COLOCO_LEDGER_ADMIN_TOKEN is the development token: set a secret")
        if len(self.admin_token.get_secret_value()) < 16:
            problems.append("COLOCO_LEDGER_ADMIN_TOKEN must be at least 16 characters")
        if self.environment == "production":
            if self.committer_private_key is not None:
                problems.append(
                    "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY is for development only: "
                    "use COLOCO_LEDGER_COMMITTER_KEYSTORE + COLOCO_LEDGER_COMMITTER_PASSWORD_FILE"
                )
            if self.slasher_private_key is not None:
                problems.append(
                    "COLOCO_LEDGER_SLASHER_PRIVATE_KEY is for development only: "
                    "use COLOCO_LEDGER_SLASHER_KEYSTORE + COLOCO_LEDGER_SLASHER_PASSWORD_FILE"
                )
            if self.committer_keystore is None or self.committer_password_file is None:
                problems.append(
                    "set COLOCO_LEDGER_COMMITTER_KEYSTORE and COLOCO_LEDGER_COMMITTER_PASSWORD_FILE"
                )
            if self.auto_create_schema:
                problems.append(
                    "COLOCO_LEDGER_AUTO_CREATE_SCHEMA is refused in production: run "
                    "`alembic upgrade head` (coloco ledger serve does it)"
                )
            if ":memory:" in self.database_url:
                problems.append("an in-memory database loses every attestation on restart")
        if problems:
            raise ConfigError("unsafe ledger settings: " + "; ".join(problems))
        return self

    def max_tokens_per_step(self) -> int | None:
        """The most tokens one inner step may claim: TOKENS_PER_STEP (the governed batch x
        seq_len), else MAX_BATCH_ROWS x the model preset's seq_len; None with neither (no model:
        the ledger builds no rows from a declaration)."""
        if self.tokens_per_step is not None:
            return self.tokens_per_step
        if self.usefulness_model is None:
            return None
        from reference.model import GPTConfig

        return self.max_batch_rows * GPTConfig.preset(self.usefulness_model).seq_len

    def committer_key(self) -> bytes | None:
        """The committer's private key (decrypting the keystore), or None if none is set."""
        return _key(
            "COMMITTER",
            self.committer_private_key,
            self.committer_keystore,
            self.committer_password_file,
        )

    def slasher_key(self) -> bytes | None:
        """The slasher's private key (SLASHER_ROLE on StakeManager), or None if none is set."""
        return _key(
            "SLASHER", self.slasher_private_key, self.slasher_keystore, self.slasher_password_file
        )


def _key(
    role: str, raw_key: SecretStr | None, keystore_path: Path | None, password_path: Path | None
) -> bytes | None:
    """A role's private key: raw hex (development), or a keystore and its password file."""
    if raw_key is not None:
        raw = raw_key.get_secret_value().removeprefix("0x")
        try:
            key = bytes.fromhex(raw)
        except ValueError as exc:
            raise ConfigError(f"COLOCO_LEDGER_{role}_PRIVATE_KEY is not hex") from exc
        if len(key) != 32:
            raise ConfigError(f"COLOCO_LEDGER_{role}_PRIVATE_KEY must be 32 bytes")
        return key
    if keystore_path is None:
        return None
    if password_path is None:
        raise ConfigError(f"COLOCO_LEDGER_{role}_KEYSTORE needs COLOCO_LEDGER_{role}_PASSWORD_FILE")
    from eth_account import Account

    try:
        keystore = keystore_path.read_text(encoding="utf-8")
        password = password_path.read_text(encoding="utf-8").strip()
        secrets.add(password)  # before the decrypt: its error could echo it
        key = bytes(Account.decrypt(keystore, password))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot decrypt {role.lower()} keystore {keystore_path}: {exc}") from exc
    secrets.add_key(key)
    return key
