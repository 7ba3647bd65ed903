"""What a contributor is owed and claiming it, as functions (the CLI and the demo call them).

The ledger serves the cumulative amount owed to a payout address with its Merkle proof against
`ContributionLedger.latestRewardsRoot()`; `claim_rewards` checks the proof's root is the one on
chain, then sends `RewardDistributor.claim(account, cumulativeAmount, proof)`, which mints the
difference to what was already claimed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from coloco_cli.common import fmt_units
from coloco_cli.node.ops import checksum
from protocol.errors import ConfigError, ContractRevertError, LedgerError, LedgerUnavailableError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Owed:
    """The ledger's answer for one payout address."""

    account: str
    cumulative_amount: int
    proof: list[bytes]
    root: bytes
    receipts: list[dict[str, Any]] = field(default_factory=list)


def _hex32(value: str, what: str) -> bytes:
    raw = bytes.fromhex(value.removeprefix("0x"))
    if len(raw) != 32:
        raise LedgerError(f"the ledger sent a {what} that is not 32 bytes: {value!r}")
    return raw


def fetch_owed(ledger_url: str, account: str, *, timeout: float = 10.0) -> Owed:
    """GET /v1/rewards/{account} from the ledger."""
    account = checksum(account, what="--account")
    url = f"{ledger_url}/v1/rewards/{account}"
    try:
        resp = httpx.get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        raise LedgerUnavailableError(
            f"ledger at {ledger_url} does not answer ({exc.__class__.__name__}): check "
            "--ledger-url or start one with `coloco ledger serve`"
        ) from exc
    if resp.status_code == 404:
        raise LedgerError(f"the ledger knows no rewards for {account}: nothing to claim yet")
    if resp.status_code != 200:
        raise LedgerError(f"ledger answered {resp.status_code} for {url}: {resp.text[:300]}")
    data = resp.json()
    return Owed(
        account=checksum(data["account"]),
        cumulative_amount=int(data["cumulative_amount"]),
        proof=[_hex32(p, "proof node") for p in data.get("proof", [])],
        root=_hex32(data["root"], "root") if data.get("root") else b"\x00" * 32,
        receipts=list(data.get("receipts", [])),
    )


@dataclass(frozen=True)
class ClaimResult:
    account: str
    cumulative_amount: int
    paid: int
    balance: int


def claim_rewards(
    chain: ChainClient, ledger_url: str, account: str, *, attempts: int = 5, wait_s: float = 1.0
) -> ClaimResult:
    """Fetch the proof for `account` and claim everything not yet claimed (sender pays gas).

    A new round may be committed between fetching the proof and sending the claim; then the
    proof is for the previous root, so it is fetched again (up to `attempts` times).
    """
    for attempt in range(attempts):
        owed = fetch_owed(ledger_url, account)
        if owed.cumulative_amount == 0:
            raise ConfigError(f"{owed.account} is owed nothing yet: its node has no settled rounds")
        onchain_root = bytes(chain.call("ContributionLedger", "latestRewardsRoot"))
        already = int(chain.call("RewardDistributor", "claimed", owed.account))
        if already >= owed.cumulative_amount and onchain_root == owed.root:
            raise ConfigError(
                f"{owed.account} already claimed all {fmt_units(already)} CMS it is owed: "
                "nothing new until the next round settles"
            )
        if onchain_root == owed.root:
            try:
                chain.transact(
                    "RewardDistributor", "claim", owed.account, owed.cumulative_amount, owed.proof
                )
            except ContractRevertError as exc:
                if exc.error_name != "InvalidProof":
                    raise
                log.info("root moved while claiming for %s; fetching a fresh proof", owed.account)
            else:
                balance = int(chain.call("ModelShareToken", "balanceOf", owed.account))
                paid = owed.cumulative_amount - already
                return ClaimResult(owed.account, owed.cumulative_amount, paid, balance)
        if attempt + 1 < attempts:
            time.sleep(wait_s)
    raise LedgerError(
        f"the ledger's proof for {account} is for root 0x{owed.root.hex()} but the chain has "
        f"0x{onchain_root.hex()}: the latest round is still being committed; retry shortly"
    )
