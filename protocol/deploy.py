"""Deploy and wire every coloco contract by running `contracts/script/Deploy.s.sol` with forge."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from eth_account import Account
from eth_utils.address import is_address, to_checksum_address

from protocol.broadcast import Limits, run_watched
from protocol.deployment import Deployment
from protocol.errors import DeploymentError
from protocol.toolchain import REPO_ROOT, foundry_bin

log = logging.getLogger(__name__)

SCRIPT = "contracts/script/Deploy.s.sol:Deploy"
# forge only writes JSON under ./deployments (foundry.toml fs_permissions); the script writes a
# scratch file there that is read back, validated, and saved wherever the caller asked.
_SCRATCH_DIR = REPO_ROOT / "deployments"
# forge's compilation cache (foundry.toml's cache_path): every `forge script` rewrites it
_SHARED_CACHE = REPO_ROOT / "cache" / "solidity-files-cache.json"
BPS = 10_000  # TrainingConfig.BPS: the ownership split's whole


# anvil mines a transaction as it arrives: 20 s without one means it will not come
DEVNET_LIMITS = Limits(total_s=300.0, idle_s=20.0, stall_s=5.0)


@dataclass(frozen=True)
class OwnershipSplit:
    """How each round's reward is split between the three kinds of contributor, in basis points
    (TrainingConfig.setOwnershipSplit): compute (nodes), code (the code pool the committee and
    votes pay from) and capital (backers, vesting after the funding ends)."""

    compute: int
    capital: int
    code: int

    def check(self) -> None:
        parts = {"compute": self.compute, "capital": self.capital, "code": self.code}
        if any(not 0 <= v <= BPS for v in parts.values()) or sum(parts.values()) != BPS:
            shown = ", ".join(f"{k}={v}" for k, v in parts.items())
            raise DeploymentError(
                f"ownership split {shown}: each part is 0..{BPS} basis points and they sum to "
                f"exactly {BPS} (100%), e.g. compute=7000,capital=2000,code=1000"
            )

    def env(self) -> str:
        """COLOCO_OWNERSHIP_SPLIT as contracts/script/CapitalDeploy.sol reads it."""
        return f"{self.compute},{self.code},{self.capital}"


def _checked_address(value: str, what: str) -> str:
    if not is_address(value):
        raise DeploymentError(f"{what} {value!r} is not a 0x-prefixed 20-byte address")
    return str(to_checksum_address(value))


def deploy(
    rpc_url: str,
    deployer_key: str,
    *,
    committer: str,
    treasury: str | None = None,
    guardian: str | None = None,
    out_path: Path,
    profile: str = "devnet",
    voting_delay: int | None = None,
    voting_period: int | None = None,
    quorum_fraction: int = 4,
    timelock_delay: int | None = None,
    unbonding_delay: int | None = None,
    dispute_window: int | None = None,
    slash_dispute_window: int | None = None,
    grant_limit: int | None = None,
    proposal_threshold: int | None = None,
    initial_inner_steps: int | None = None,
    ownership_split: OwnershipSplit | None = None,
    code_committee: list[str] | None = None,
    limits: Limits | None = None,
) -> Deployment:
    """Deploys everything as `deployer_key`, writes the deployment JSON to `out_path`, returns it.

    `profile` is "devnet" (anvil's chain id 31337 only: the contracts' deploy script refuses it
    anywhere else) or "production" (which requires `treasury` and `guardian` and refuses weak
    governance settings). `committer` gets COMMITTER_ROLE on the ContributionLedger; slashed stake
    goes to `treasury` (never the Timelock or governor); `guardian` may pause claims, commits and
    withdrawals, revoke pending roots and veto slashes, never move funds. Every duration is in
    seconds (the token and governor use a timestamp clock); None keeps the profile's default
    (contracts/script/Deploy.s.sol). `quorum_fraction` is in percent, `grant_limit` in token
    units per 30 days. `ownership_split` is the genesis split of each round's reward between
    compute, code and capital (basis points summing to 10,000; None keeps the contract's all to
    compute, or COLOCO_OWNERSHIP_SPLIT from the environment); `code_committee` are the first
    members of CodeRegistry's review committee (None: COLOCO_CODE_COMMITTEE, else nobody until
    governance appoints one). `initial_inner_steps` sets the run's genesis H before the Timelock
    takes TrainingConfig over (None keeps the contract default). `limits` bound how long the
    broadcast may go without progress (:mod:`protocol.broadcast`); None is DEVNET_LIMITS on the
    devnet profile (anvil mines each transaction at once) and the patient defaults in
    production.
    """
    if profile not in ("devnet", "production"):
        raise DeploymentError(f"profile {profile!r} must be 'devnet' or 'production'")
    committer = _checked_address(committer, "committer")
    roles = {"treasury": treasury, "guardian": guardian}
    for name, value in roles.items():
        if value is not None:
            roles[name] = _checked_address(value, name)
        elif profile == "production":
            raise DeploymentError(
                f"a production deployment needs an explicit {name} address (no silent roles)"
            )
    if not 0 < quorum_fraction <= 100:
        raise DeploymentError(f"quorum_fraction {quorum_fraction} must be a percentage in 1..100")
    if voting_period is not None and voting_period <= 0:
        raise DeploymentError(f"voting_period {voting_period} must be at least 1 second")
    if initial_inner_steps is not None and initial_inner_steps <= 0:
        raise DeploymentError(
            f"initial_inner_steps {initial_inner_steps} must be >= 1 (or None for the default)"
        )
    if ownership_split is not None:
        ownership_split.check()
    committee = [_checked_address(a, "code committee member") for a in code_committee or []]
    numbers = {
        "COLOCO_VOTING_DELAY": voting_delay,
        "COLOCO_VOTING_PERIOD": voting_period,
        "COLOCO_TIMELOCK_DELAY": timelock_delay,
        "COLOCO_UNBONDING_DELAY": unbonding_delay,
        "COLOCO_DISPUTE_WINDOW": dispute_window,
        "COLOCO_SLASH_DISPUTE_WINDOW": slash_dispute_window,
        "COLOCO_GRANT_LIMIT": grant_limit,
        "COLOCO_PROPOSAL_THRESHOLD": proposal_threshold,
    }
    if any(v is not None and v < 0 for v in numbers.values()):
        raise DeploymentError("delays, windows, grant_limit and proposal_threshold must be >= 0")
    try:
        deployer = Account.from_key(deployer_key).address
    except (ValueError, TypeError) as exc:
        raise DeploymentError(f"deployer_key is not a valid secp256k1 private key: {exc}") from exc

    _SCRATCH_DIR.mkdir(exist_ok=True)
    scratch = _SCRATCH_DIR / f".deploy-{uuid.uuid4().hex}.json"
    # the variables this wrapper manages never leak in from the caller's environment (an unset
    # one means the profile's default); others (e.g. COLOCO_OWNERSHIP_SPLIT) pass through
    managed = {*numbers, "COLOCO_TREASURY", "COLOCO_GUARDIAN"}
    env = {k: v for k, v in os.environ.items() if k not in managed}
    env.update(
        {
            "COLOCO_PROFILE": profile,
            "COLOCO_COMMITTER": committer,
            "COLOCO_QUORUM_FRACTION": str(quorum_fraction),
            "COLOCO_INITIAL_INNER_STEPS": str(initial_inner_steps or 0),
            "COLOCO_DEPLOY_OUT": str(scratch.relative_to(REPO_ROOT)),
            # keep forge's broadcast logs (they hold the key's address) out of the tracked tree
            "FOUNDRY_BROADCAST": str(REPO_ROOT / "cache" / "broadcast"),
        }
    )
    env.update({k: str(v) for k, v in numbers.items() if v is not None})
    if ownership_split is not None:  # CapitalDeploy.sol reads compute,code,capital
        env["COLOCO_OWNERSHIP_SPLIT"] = ownership_split.env()
    if code_committee is not None:
        env["COLOCO_CODE_COMMITTEE"] = ",".join(committee)
    if roles["treasury"] is not None:
        env["COLOCO_TREASURY"] = str(roles["treasury"])
    if roles["guardian"] is not None:
        env["COLOCO_GUARDIAN"] = str(roles["guardian"])
    cmd = [
        str(foundry_bin("forge")),
        "script",
        SCRIPT,
        # compile only sources and the script: a cold checkout deploys without building tests
        "--skip",
        "test",
        "--broadcast",
        # one transaction in flight at a time: a lost one cannot leave later nonces queued
        "--slow",
        "--rpc-url",
        rpc_url,
        "--private-key",
        deployer_key,
    ]
    log.info(
        "deploying coloco contracts (%s profile) to %s as %s (committer %s)",
        profile,
        rpc_url,
        deployer,
        committer,
    )
    try:
        with _private_cache(env):
            run_watched(
                cmd,
                cwd=REPO_ROOT,
                env=env,
                rpc_url=rpc_url,
                sender=deployer,
                label=f"forge script {SCRIPT}",
                limits=limits or (DEVNET_LIMITS if profile == "devnet" else Limits()),
            )
        if not scratch.is_file():
            raise DeploymentError(
                f"forge script {SCRIPT} succeeded but wrote no deployment JSON at {scratch}"
            )
        deployment = Deployment.load(scratch)
    finally:
        scratch.unlink(missing_ok=True)
    deployment.save(out_path)
    log.info("deployment written to %s (chain %d)", out_path, deployment.chain_id)
    return deployment


@contextlib.contextmanager
def _private_cache(env: dict[str, str]) -> Iterator[None]:
    """Point forge (``env``) at a private copy of the shared compilation cache for one run.

    Every ``forge script`` rewrites its cache file in place, so deploys running side by side (test
    workers, two devnets) could read one another's half-written file: forge then logs "EOF while
    parsing" and recompiles everything, long enough to look like a stalled deploy. Each run reads
    its own copy; the copy replaces the shared file atomically afterwards (a later reader sees the
    whole old file or the whole new one), so a compilation done here is not redone next time.
    """
    with tempfile.TemporaryDirectory(prefix="coloco-forge-cache-") as private:
        mine = Path(private) / _SHARED_CACHE.name
        if _SHARED_CACHE.is_file():
            shutil.copyfile(_SHARED_CACHE, mine)
        env["FOUNDRY_CACHE_PATH"] = private
        yield
        if mine.is_file():
            _SHARED_CACHE.parent.mkdir(exist_ok=True)
            staged = _SHARED_CACHE.with_name(f".{_SHARED_CACHE.name}.{uuid.uuid4().hex}")
            shutil.copyfile(mine, staged)
            staged.replace(_SHARED_CACHE)
