"""What a contributor is owed and claiming it, as functions (the CLI and the demo call them).

The ledger serves the cumulative amount owed to a payout address with its Merkle proof against
its latest committed rewards root. A root becomes claimable only after the ledger contract's
dispute window (`ContributionLedger.disputeWindow()`, seconds after its commit), during which the
guardian or governance may revoke a bad root. `claim_rewards` reads the root's status on chain
(`rootInfo`: pending until `finalizedAt`, revoked, or claimable), explains when a pending reward
becomes claimable (or waits with --wait-final), then sends `RewardDistributor.claim(account,
cumulativeAmount, proof)`, which mints the difference to what was already claimed. A later commit
never invalidates the proof: any finalized root not older than the account's last claim pays.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coloco_cli.common import fmt_units
from coloco_cli.ledger_http import ledger_get
from coloco_cli.node.ops import checksum, utc
from protocol.errors import ConfigError, ContractRevertError, LedgerError
from protocol.types import Address

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
    root_state: str = "unknown"
    """The root as the ledger indexed it: pending (dispute window), finalized, revoked."""
    claimable_at: int | None = None
    """Unix seconds from which the root pays (its dispute window's end)."""


def _hex32(value: str, what: str) -> bytes:
    raw = bytes.fromhex(value.removeprefix("0x"))
    if len(raw) != 32:
        raise LedgerError(f"the ledger sent a {what} that is not 32 bytes: {value!r}")
    return raw


def fetch_owed(ledger_url: str, account: str, *, timeout: float = 10.0) -> Owed:
    """GET /v1/rewards/{account} from the ledger."""
    account = checksum(account, what="--account")
    path = f"/v1/rewards/{account}"
    resp = ledger_get(ledger_url, path, expect=("account", "cumulative_amount"), timeout=timeout)
    if resp.status_code == 404:
        raise LedgerError(f"the ledger knows no rewards for {account}: nothing to claim yet")
    if resp.status_code != 200:
        raise LedgerError(f"ledger answered {resp.status_code} for {path}: {resp.text[:300]}")
    data = resp.json()
    return Owed(
        account=checksum(data["account"]),
        cumulative_amount=int(data["cumulative_amount"]),
        proof=[_hex32(p, "proof node") for p in data.get("proof", [])],
        root=_hex32(data["root"], "root") if data.get("root") else b"\x00" * 32,
        receipts=list(data.get("receipts", [])),
        root_state=str(data.get("root_state") or "unknown"),
        claimable_at=int(data["claimable_at"]) if data.get("claimable_at") is not None else None,
    )


@dataclass(frozen=True)
class ClaimResult:
    account: str
    cumulative_amount: int
    paid: int
    balance: int


CLAIM_GAS = 300_000
"""Explicit gas for claims: estimation runs on the latest block, whose timestamp can be before the
root's dispute window ends although the next block's is not (a devnet mines only on demand), and
it can miss a new Votes checkpoint; a claim uses ~210,000 at most (docs/contracts.md)."""


class ChainClock:
    """A lower bound on the next block's timestamp. A devnet mines only on demand and its clock
    may run ahead of (evm_increaseTime) or behind the wall clock, so neither the latest block's
    timestamp nor the wall clock alone is right: the latest block's timestamp plus the wall time
    elapsed since it was first seen is (the block was mined no later than that)."""

    def __init__(self, chain: ChainClient) -> None:
        self.chain = chain
        self.base: tuple[int, float] | None = None

    def now(self) -> int:
        latest = int(self.chain.w3.eth.get_block("latest")["timestamp"])
        wall = time.time()
        if self.base is None or latest > self.base[0]:
            self.base = (latest, wall)
        ts, seen = self.base
        return max(latest, int(ts + (wall - seen)))


def claim_rewards(
    chain: ChainClient,
    ledger_url: str,
    account: str,
    *,
    attempts: int = 5,
    wait_s: float = 1.0,
    wait_pending: bool = False,
    max_wait_s: float = 120.0,
) -> ClaimResult:
    """Fetch the proof for `account` and claim everything not yet claimed (sender pays gas).

    The proof's root must be claimable on chain: committed and past its dispute window. A root
    the chain does not know yet (its commit is in flight) is retried `attempts` times; a pending
    root raises a ConfigError saying when it becomes claimable, or with `wait_pending` is waited
    for (at most `max_wait_s`); a revoked root raises (the ledger re-commits a corrected one).
    """
    from protocol.types import Bytes32

    status = None
    clock = ChainClock(chain)
    for attempt in range(attempts):
        owed = fetch_owed(ledger_url, account)
        if owed.cumulative_amount == 0:
            raise ConfigError(f"{owed.account} is owed nothing yet: its node has no settled rounds")
        already = int(chain.claimed(Address(owed.account)))
        if already >= owed.cumulative_amount:
            raise ConfigError(
                f"{owed.account} already claimed all {fmt_units(already)} CMS it is owed: "
                "nothing new until the next round settles"
            )
        status = chain.root_status(Bytes32(owed.root))
        state = status.state(clock.now())
        if state == "revoked":
            raise ConfigError(
                f"the ledger's root 0x{owed.root.hex()} was revoked on chain during its dispute "
                "window (the guardian or governance found it wrong): it never pays; wait for the "
                "ledger's corrected root and claim again"
            )
        if state == "pending":
            wait = max(status.finalized_at - clock.now(), 0) + 1.0
            if not wait_pending or wait > max_wait_s:
                raise ConfigError(
                    f"{fmt_units(owed.cumulative_amount - already)} CMS for {owed.account} are "
                    f"committed under root 0x{owed.root.hex()[:12]}… but still in its dispute "
                    f"window ({chain.dispute_window()} s, during which the guardian may revoke a "
                    f"bad root): claimable from {utc(status.finalized_at)} (about "
                    f"{int(wait)} s, by the chain's clock); run `coloco rewards claim` again then "
                    "(on a devnet, which mines only on demand: `coloco devnet mine 1 --seconds "
                    f"{int(wait)}`), or pass --wait-final"
                )
            log.info("root pending for %.0f s more; waiting to claim for %s", wait, owed.account)
            time.sleep(wait)
        elif state == "claimable":
            try:
                chain.transact(
                    "RewardDistributor",
                    "claim",
                    owed.account,
                    owed.cumulative_amount,
                    owed.proof,
                    gas=CLAIM_GAS,
                )
            except ContractRevertError as exc:
                if exc.error_name not in ("InvalidProof", "RootPending"):
                    raise
                log.info("claim for %s refused (%s); retrying", owed.account, exc.error_name)
            else:
                balance = int(chain.token_balance(Address(owed.account)))
                paid = owed.cumulative_amount - already
                return ClaimResult(owed.account, owed.cumulative_amount, paid, balance)
        if attempt + 1 < attempts:
            time.sleep(wait_s)
    raise LedgerError(
        f"the ledger's proof for {account} is for root 0x{owed.root.hex()}, which the chain "
        f"{'does not know yet' if status is None or status.index == 0 else 'did not accept'}: "
        "the latest round is still being committed; retry shortly"
    )
