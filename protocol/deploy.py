"""Deploy and wire every coloco contract by running `contracts/script/Deploy.s.sol` with forge."""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from pathlib import Path

from eth_account import Account
from eth_utils.address import is_address, to_checksum_address

from protocol.deployment import Deployment
from protocol.errors import DeploymentError
from protocol.toolchain import REPO_ROOT, foundry_bin

log = logging.getLogger(__name__)

SCRIPT = "contracts/script/Deploy.s.sol:Deploy"
# forge only writes JSON under ./deployments (foundry.toml fs_permissions); the script writes a
# scratch file there that is read back, validated, and saved wherever the caller asked.
_SCRATCH_DIR = REPO_ROOT / "deployments"
_STDERR_TAIL = 4000
_TIMEOUT_S = 600


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
    out_path: Path,
    voting_delay: int = 1,
    voting_period: int = 20,
    quorum_fraction: int = 4,
    timelock_delay: int = 1,
    unbonding_delay: int = 60,
    grant_cap: int = 1_000_000 * 10**18,
    initial_inner_steps: int | None = None,
) -> Deployment:
    """Deploys everything as `deployer_key`, writes the deployment JSON to `out_path`, returns it.

    `committer` gets COMMITTER_ROLE on the ContributionLedger; slashed stake goes to `treasury`
    (default: the Timelock). Voting delay and period are in blocks, the timelock and unbonding
    delays in seconds, `quorum_fraction` in percent, `grant_cap` in token units.
    `initial_inner_steps` sets the run's genesis H before the Timelock takes TrainingConfig over
    (None keeps the contract default); every later change goes through governance.
    """
    committer = _checked_address(committer, "committer")
    if treasury is not None:
        treasury = _checked_address(treasury, "treasury")
    if not 0 < quorum_fraction <= 100:
        raise DeploymentError(f"quorum_fraction {quorum_fraction} must be a percentage in 1..100")
    if voting_period <= 0:
        raise DeploymentError(f"voting_period {voting_period} must be at least 1 block")
    if initial_inner_steps is not None and initial_inner_steps <= 0:
        raise DeploymentError(
            f"initial_inner_steps {initial_inner_steps} must be >= 1 (or None for the default)"
        )
    if min(voting_delay, timelock_delay, unbonding_delay, grant_cap) < 0:
        raise DeploymentError("delays and grant_cap must be non-negative")
    try:
        deployer = Account.from_key(deployer_key).address
    except (ValueError, TypeError) as exc:
        raise DeploymentError(f"deployer_key is not a valid secp256k1 private key: {exc}") from exc

    _SCRATCH_DIR.mkdir(exist_ok=True)
    scratch = _SCRATCH_DIR / f".deploy-{uuid.uuid4().hex}.json"
    env = {
        **os.environ,
        "COLOCO_COMMITTER": committer,
        "COLOCO_TREASURY": treasury or "0x0000000000000000000000000000000000000000",
        "COLOCO_VOTING_DELAY": str(voting_delay),
        "COLOCO_VOTING_PERIOD": str(voting_period),
        "COLOCO_QUORUM_FRACTION": str(quorum_fraction),
        "COLOCO_TIMELOCK_DELAY": str(timelock_delay),
        "COLOCO_UNBONDING_DELAY": str(unbonding_delay),
        "COLOCO_GRANT_CAP": str(grant_cap),
        "COLOCO_INITIAL_INNER_STEPS": str(initial_inner_steps or 0),
        "COLOCO_DEPLOY_OUT": str(scratch.relative_to(REPO_ROOT)),
        # keep forge's broadcast logs (they hold the key's address) out of the tracked tree
        "FOUNDRY_BROADCAST": str(REPO_ROOT / "cache" / "broadcast"),
    }
    cmd = [
        str(foundry_bin("forge")),
        "script",
        SCRIPT,
        # compile only sources and the script: a cold checkout deploys without building tests
        "--skip",
        "test",
        "--broadcast",
        "--rpc-url",
        rpc_url,
        "--private-key",
        deployer_key,
    ]
    log.info("deploying coloco contracts to %s as %s (committer %s)", rpc_url, deployer, committer)
    try:
        proc = subprocess.run(
            cmd,
            check=False,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
        )
        if proc.returncode != 0:
            tail = (proc.stderr.strip() or proc.stdout.strip())[-_STDERR_TAIL:]
            raise DeploymentError(
                f"forge script {SCRIPT} failed (exit {proc.returncode}) against {rpc_url}; "
                f"check the RPC URL and that the deployer is funded. forge said:\n{tail}"
            )
        if not scratch.is_file():
            raise DeploymentError(
                f"forge script {SCRIPT} succeeded but wrote no deployment JSON at {scratch}"
            )
        deployment = Deployment.load(scratch)
    except subprocess.TimeoutExpired as exc:
        raise DeploymentError(f"forge script {SCRIPT} did not finish in {_TIMEOUT_S} s") from exc
    finally:
        scratch.unlink(missing_ok=True)
    deployment.save(out_path)
    log.info("deployment written to %s (chain %d)", out_path, deployment.chain_id)
    return deployment
