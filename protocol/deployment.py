"""The deployment JSON (docs/interfaces.md) and the ABIs of the deployed contracts.

`Deployment.load(path)` reads what `protocol.deploy.deploy` (or `forge script
contracts/script/Deploy.s.sol`) wrote; `abi(name)` reads forge's artifact under `out/`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.eip712 import is_address, to_checksum_address
from protocol.errors import DeploymentError
from protocol.toolchain import forge_out_dir
from protocol.types import Address, ChainId

log = logging.getLogger(__name__)

CONTRACT_NAMES: tuple[str, ...] = (
    "StakeManager",
    "ContributionLedger",
    "ModelShareToken",
    "RewardDistributor",
    "TrainingConfig",
    "ModelGovernor",
    "TimelockController",
)
"""Every contract a deployment holds, by its Solidity name (also its artifact name)."""

FUNDING_CONTRACT_NAMES: tuple[str, ...] = ("RunFunding", "CodeRegistry", "ComputeLeases")
"""Contracts a deployment holds since run funding, code contributions and compute leases (absent
in older deployments: the commands that need them say so)."""

GOVERNANCE_KEYS: tuple[str, ...] = (
    "voting_delay",
    "voting_period",
    "vote_extension",
    "quorum_fraction",
    "timelock_delay",
    "dispute_window",
    "slash_dispute_window",
    "unbonding_delay",
)
"""Governance settings in the JSON; every duration is in seconds (timestamp clock)."""

_TOP_KEYS = ("chain_id", "deployment_block", "deployer", "committer", "contracts", "governance")


def _address(value: object, where: str) -> Address:
    if not isinstance(value, str) or not is_address(value):
        raise DeploymentError(f"{where} is {value!r}, not a 0x-prefixed 20-byte address")
    return Address(to_checksum_address(value))


def _uint(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DeploymentError(f"{where} is {value!r}, not a non-negative integer")
    return value


@dataclass(frozen=True)
class Deployment:
    """Where every coloco contract lives on one chain, and how governance was set up."""

    chain_id: ChainId
    deployment_block: int
    """Block of the first deployment transaction: index events from here."""
    deployer: Address
    committer: Address
    contracts: dict[str, Address] = field(default_factory=dict)
    governance: dict[str, int] = field(default_factory=dict)
    treasury: Address | None = None
    """Receiver of slashed stake (absent in deployments older than the bounded-trust contracts)."""
    guardian: Address | None = None
    """May pause claims, commits and withdrawals, revoke pending roots, veto slashes."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "deployment") -> Deployment:
        """Validates and builds a Deployment from the JSON object; errors name the bad key."""
        missing = [k for k in _TOP_KEYS if k not in data]
        if missing:
            raise DeploymentError(
                f"{source} lacks {', '.join(missing)}: redeploy with `coloco devnet deploy` "
                "or fix the JSON (see docs/interfaces.md, Deployment JSON)"
            )
        contracts_raw = data["contracts"]
        governance_raw = data["governance"]
        if not isinstance(contracts_raw, dict) or not isinstance(governance_raw, dict):
            raise DeploymentError(f"{source}: 'contracts' and 'governance' must be JSON objects")
        absent = [n for n in CONTRACT_NAMES if n not in contracts_raw]
        if absent:
            raise DeploymentError(f"{source}: contracts lacks {', '.join(absent)}; redeploy")
        contracts = {
            name: _address(value, f"{source}: contracts.{name}")
            for name, value in contracts_raw.items()
        }
        governance = {
            key: _uint(value, f"{source}: governance.{key}")
            for key, value in governance_raw.items()
        }
        return cls(
            chain_id=ChainId(_uint(data["chain_id"], f"{source}: chain_id")),
            deployment_block=_uint(data["deployment_block"], f"{source}: deployment_block"),
            deployer=_address(data["deployer"], f"{source}: deployer"),
            committer=_address(data["committer"], f"{source}: committer"),
            contracts=contracts,
            governance=governance,
            treasury=_address(data["treasury"], f"{source}: treasury")
            if "treasury" in data
            else None,
            guardian=_address(data["guardian"], f"{source}: guardian")
            if "guardian" in data
            else None,
        )

    @classmethod
    def load(cls, path: Path | str) -> Deployment:
        """Reads a deployment JSON file."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise DeploymentError(
                f"no deployment JSON at {path}: deploy first (`coloco devnet deploy`)"
            ) from None
        except json.JSONDecodeError as exc:
            raise DeploymentError(f"{path} is not valid JSON ({exc}); redeploy") from exc
        if not isinstance(data, dict):
            raise DeploymentError(f"{path} holds a JSON {type(data).__name__}, not an object")
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of docs/interfaces.md."""
        out: dict[str, Any] = {
            "chain_id": self.chain_id,
            "deployment_block": self.deployment_block,
            "deployer": self.deployer,
            "committer": self.committer,
            "contracts": dict(self.contracts),
            "governance": dict(self.governance),
        }
        if self.treasury is not None:
            out["treasury"] = self.treasury
        if self.guardian is not None:
            out["guardian"] = self.guardian
        return out

    def save(self, path: Path | str) -> None:
        """Writes the deployment JSON (parent folders created)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    def address(self, name: str) -> Address:
        """The checksum address of contract `name` (e.g. "ContributionLedger")."""
        try:
            return self.contracts[name]
        except KeyError:
            known = ", ".join(sorted(self.contracts))
            raise DeploymentError(
                f"no contract named {name!r} in this deployment (it has {known})"
            ) from None


SHIPPED_ABI_DIR = Path(__file__).resolve().parent / "abi"
"""The deployment's ABIs shipped as package data (an installed `coloco` has no `out/`)."""


SHIPPED_CONTRACTS: tuple[str, ...] = (*CONTRACT_NAMES, *FUNDING_CONTRACT_NAMES)
"""Every contract whose ABI ships in the package: each one a deployment may hold (a test checks
that every contract the code loads by name is here, and that the wheel holds each)."""


def export_abis() -> list[Path]:
    """Copy each deployed contract's ABI from forge's `out/` into `protocol/abi/` (package data;
    `make setup` runs this after `forge build`)."""
    written = []
    for name in SHIPPED_CONTRACTS:
        artifact = json.loads((forge_out_dir() / f"{name}.sol" / f"{name}.json").read_text())
        path = SHIPPED_ABI_DIR / f"{name}.json"
        text = json.dumps(artifact["abi"], indent=1, sort_keys=True) + "\n"
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def abi(name: str) -> list[dict[str, Any]]:
    """The ABI of contract `name`: forge's artifact `out/<name>.sol/<name>.json` when this is a
    built checkout, else the copy shipped in the package (`protocol/abi/<name>.json`)."""
    path = forge_out_dir() / f"{name}.sol" / f"{name}.json"
    if not path.is_file() and (SHIPPED_ABI_DIR / f"{name}.json").is_file():
        shipped = json.loads((SHIPPED_ABI_DIR / f"{name}.json").read_text())
        if not isinstance(shipped, list):
            raise DeploymentError(f"shipped ABI {name}.json is not a list: reinstall coloco")
        return shipped
    try:
        artifact = json.loads(path.read_text())
    except FileNotFoundError:
        raise DeploymentError(
            f"no forge artifact for {name} at {path}: run `forge build` at the repository root"
        ) from None
    except json.JSONDecodeError as exc:
        raise DeploymentError(f"forge artifact {path} is not valid JSON: rebuild") from exc
    result = artifact.get("abi") if isinstance(artifact, dict) else None
    if not isinstance(result, list):
        raise DeploymentError(f"forge artifact {path} has no 'abi' list: rebuild")
    return result


def available_abis(names: Iterable[str]) -> list[list[dict[str, Any]]]:
    """The ABIs of those of ``names`` this install has (a contract without an artifact is logged
    and left out: its custom errors will not decode), for a deployment's error decoder."""
    found = []
    for name in names:
        try:
            found.append(abi(name))
        except DeploymentError:
            log.debug("no ABI for %s; its custom errors will not decode", name)
    return found
