"""Funding a run, as functions (the CLI and the demo call them).

Backers deposit ETH into `RunFunding` for a run; the ledger pays it to compute contributors in
cumulative ETH roots (claimable after a dispute window, proofs from
`GET /v1/funding/{run}/eth/{account}`); after the run's funding ends, backers' share of the
capital pool vests linearly and `claimVested` pays it from the contract's escrow.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from coloco_cli.common import fmt_units
from coloco_cli.ledger_http import ledger_get
from coloco_cli.node.ops import checksum
from coloco_cli.run.ops import parse_run_id
from coloco_cli.tx import tx_hex
from protocol.errors import ConfigError, ContractRevertError, LedgerError
from protocol.types import Address

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

HINTS = {
    "RunEnded": "deposits into this run are closed (its funding ended)",
    "RunIsCancelled": "governance cancelled this run: take a refund with `coloco fund refund`",
    "UnknownRun": "nobody opened this run for funding yet (`coloco fund open`, by its organiser)",
    "RunNotCancelled": "refunds exist only for cancelled runs; this run is live",
    "VestingNotStarted": "capital ownership vests only after the run's funding ends",
    "NothingVested": (
        "nothing more has vested since the last claim: `coloco fund status RUN --backer "
        "ADDRESS` shows the entitlement and what vested"
    ),
    "NothingToRefund": "no deposit to refund, or already refunded",
    "RootPending": (
        "the ETH root is in its dispute window: claim once it has passed, or pass --wait-final"
    ),
    "NothingToClaim": "everything this account earned in ETH so far is already paid",
    "RefundPending": "an ETH root of this run can still be revoked: refunds open when it is final",
    "EnforcedPause": "the guardian paused RunFunding: only governance resumes it",
}


def run_bytes(run_id: str) -> bytes:
    """The run's 32-byte id: a name or 0x + 64 hex digits, resolved as every command does."""
    return parse_run_id(run_id)


def open_run(chain: ChainClient, run_id: str, funding_end: int, eth_per_round: int) -> str:
    """Opens `run_id` for deposits until `funding_end` (unix seconds). The committer only."""
    return tx_hex(
        chain.transact("RunFunding", "openRun", run_bytes(run_id), funding_end, eth_per_round)
    )


def deposit(chain: ChainClient, run_id: str, wei: int) -> str:
    if wei <= 0:
        raise ConfigError("the deposit must be more than 0 wei")
    return tx_hex(chain.transact("RunFunding", "deposit", run_bytes(run_id), value=wei))


def status(chain: ChainClient, run_id: str, backer: str | None = None) -> dict[str, Any]:
    """The run's accounting, and a backer's deposit, entitlement, vested and claimed capital."""
    run = run_bytes(run_id)
    t = chain.run_funding.run_of(run)
    if t.funding_end == 0:
        raise ConfigError(
            f"run {run_id} was never opened for funding: its organiser opens it with "
            f"`coloco fund open {run_id}`"
        )
    out: dict[str, Any] = {
        "run_id": "0x" + run.hex(),
        "funding_end": t.funding_end,
        "cancelled_at": t.cancelled_at,
        "last_eth_round": t.last_round if t.has_round else None,
        "total_deposited_wei": str(t.total_deposited),
        "eth_committed_wei": str(t.eth_committed),
        "eth_paid_to_compute_wei": str(t.eth_paid),
        "capital_pool": str(t.capital_pool),
        "eth_per_round_wei": str(t.eth_per_round),
        "refund_pool_wei": str(t.refund_pool),
        "refunded_wei": str(t.refunded),
        "held_wei": str(t.total_deposited - t.eth_paid - t.refunded),
    }
    if backer is not None:
        who = Address(checksum(backer, what="--backer"))
        funding = chain.run_funding
        out["backer"] = {
            "address": who,
            "deposited_wei": str(funding.backer_of(run, who).deposited),
            "entitlement": str(funding.entitlement(run, who)),
            "vested": str(funding.vested(run, who)),
            "claimed": str(funding.capital_claimed(run, who)),
        }
    return out


def fetch_eth_claim(ledger_url: str, run_id: str, account: str) -> dict[str, Any]:
    path = f"/v1/funding/0x{run_bytes(run_id).hex()}/eth/{account}"
    resp = ledger_get(ledger_url, path)
    if resp.status_code != 200:
        raise LedgerError(f"ledger answered {resp.status_code} for {path}: {resp.text[:300]}")
    data: dict[str, Any] = resp.json()
    return data


def claim_eth(
    chain: ChainClient,
    ledger_url: str,
    run_id: str,
    account: str,
    *,
    wait_final: bool = False,
    max_wait_s: float = 120.0,
) -> dict[str, Any]:
    """Pays `account` the ETH it earned for compute in `run_id` (nothing if nothing is new).

    The ledger's latest ETH root pays only after its dispute window: a pending root raises a
    ConfigError saying when (in UTC) it becomes claimable, or with `wait_final` is waited for
    (at most `max_wait_s`), as `coloco rewards claim --wait-final` does."""
    from coloco_cli.node.ops import utc
    from coloco_cli.rewards.ops import CLAIM_GAS, ChainClock

    who = checksum(account, what="--account")
    run = run_bytes(run_id)
    owed = fetch_eth_claim(ledger_url, run_id, who)
    cumulative = int(owed.get("cumulative_wei") or 0)
    already = int(chain.run_funding.eth_claimed(run, Address(who)))
    if cumulative <= already or not owed.get("root"):
        return {"account": who, "eth_paid_wei": "0", "cumulative_wei": str(cumulative)}
    root = bytes.fromhex(owed["root"][2:])
    finalizes_at = int(chain.contract("RunFunding").functions.rootOf(run, root).call()[0])
    clock = ChainClock(chain)
    wait = finalizes_at - clock.now() + 1
    if finalizes_at and wait > 0:
        if not wait_final or wait > max_wait_s:
            raise ConfigError(
                f"{fmt_units(cumulative - already)} ETH for {who} are committed under ETH root "
                f"0x{root.hex()[:12]}… but still in its dispute window (the guardian may revoke "
                f"a bad root until then): claimable from {utc(finalizes_at)} (about {wait} s, by "
                "the chain's clock); run `coloco fund claim` again then (on a devnet, which mines "
                f"only on demand: `coloco devnet mine 1 --seconds {wait}`), or pass --wait-final"
            )
        log.info("ETH root pending for %d s more; waiting to claim for %s", wait, who)
        time.sleep(wait)
    proof = [bytes.fromhex(p[2:]) for p in owed["proof"]]
    latest = int(chain.w3.eth.get_block("latest")["timestamp"])
    # final by the next block's time but not by the latest's (a devnet mines on demand): gas
    # estimation on the latest block would refuse it, so the gas is given (as rewards claim does)
    gas = CLAIM_GAS if latest < finalizes_at else None
    receipt = chain.transact("RunFunding", "claimEth", run, who, cumulative, root, proof, gas=gas)
    return {
        "account": who,
        "eth_paid_wei": str(cumulative - already),
        "cumulative_wei": str(cumulative),
        "tx": tx_hex(receipt),
    }


# why accrueCapital may refuse a root another caller (the ledger's settler) is handling
_ACCRUAL_SKIPS = frozenset(
    {"CapitalAlreadyAccrued", "NoCapitalToAccrue", "RootPending", "RootRevoked"}
)


def accrue(chain: ChainClient, run_id: str) -> list[str]:
    """Accrues the capital share of each final, unrevoked ETH root of `run_id` not accrued yet
    (the ledger's settler does the same; anyone may). Returns the transaction hashes."""
    run = run_bytes(run_id)
    functions = chain.contract("RunFunding").functions
    event = chain.contract("RunFunding").events.EthRootCommitted
    logs = event.get_logs(
        from_block=chain.deployment.deployment_block, argument_filters={"runId": run}
    )
    now = int(chain.w3.eth.get_block("latest")["timestamp"])
    sent = []
    for entry in logs:
        root = bytes(entry["args"]["root"])
        finalizes_at, revoked, accrued = functions.rootOf(run, root).call()[:3]
        if revoked or accrued or int(finalizes_at) > now:
            continue
        try:
            sent.append(tx_hex(chain.transact("RunFunding", "accrueCapital", run, root)))
        except ContractRevertError as exc:
            if exc.error_name not in _ACCRUAL_SKIPS:
                raise
            log.info("capital of root 0x%s not accrued: %s", root.hex(), exc.error_name)
    return sent


def split_text(chain: ChainClient) -> str:
    """TrainingConfig's ownership split, as a person reads it."""
    compute, code, capital = chain.training_config.ownership_split()
    return f"compute {compute} bps, capital {capital} bps, code {code} bps"


def split_fix(part: str) -> str:
    """How a share of the ownership split that is 0 is changed, on a devnet and elsewhere."""
    return (
        f"governance changes it (a proposal calling TrainingConfig.setOwnershipSplit); on a "
        f"devnet, deploy with a {part} share: `coloco devnet deploy --ownership-split "
        "compute=7000,capital=2000,code=1000` (its default)"
    )


def why_nothing_vests(chain: ChainClient, run_id: str, backer: str) -> str | None:
    """Why `backer` has nothing (more) to claim of `run_id`'s capital pool now, or None.

    Checked before `claimVested` is sent, so that the refusal says why (the contract's
    NothingVested and VestingNotStarted cannot: a capital share of 0, an empty pool, no
    deposit, or vesting still to come) and, by the chain's clock, when it changes."""
    from coloco_cli.node.ops import utc
    from coloco_cli.rewards.ops import ChainClock

    run = run_bytes(run_id)
    who = Address(backer)
    funding = chain.run_funding
    t = funding.run_of(run)
    if t.funding_end == 0:
        return None  # the contract's UnknownRun says it, with its hint
    end = t.cancelled_at if 0 < t.cancelled_at < t.funding_end else t.funding_end
    period = int(chain.contract("RunFunding").functions.vestingPeriod().call())
    now = ChainClock(chain).now()
    mine = "(on a devnet, which mines only on demand: `coloco devnet mine 1 --seconds {}`)"
    if now < end:
        return (
            f"capital ownership of run {run_id} vests only after its funding ends, "
            f"{utc(end)}, over {period} s: in {end - now} s by the chain's clock "
            + mine.format(end - now + period)
        )
    if t.capital_pool == 0:
        if chain.training_config.ownership_split()[2] == 0:
            return (
                f"the run's capital pool is 0 CMS and stays so: the ownership split gives "
                f"backers nothing ({split_text(chain)}); " + split_fix("capital")
            )
        return (
            "the run's capital pool is still 0 CMS: it grows by the capital share of each "
            "round whose ETH root (paid from the deposits) is final; wait for rounds"
        )
    full = int(funding.entitlement(run, who))
    claimed = int(funding.capital_claimed(run, who))
    if full == 0:
        return f"{who} deposited nothing in run {run_id} before its funding ended: no share"
    if int(funding.vested(run, who)) > claimed and now >= end:
        return None
    if claimed >= full and now >= end + period:
        return f"{who} already claimed all {fmt_units(full)} CMS of its share of run {run_id}"
    return (
        f"{fmt_units(claimed)} of {who}'s {fmt_units(full)} CMS are claimed and the rest vests "
        f"until {utc(end + period)} " + mine.format(max(end + period - now, 1))
    )


def claim_vested(chain: ChainClient, run_id: str, backer: str) -> dict[str, Any]:
    """Accrues the run's final ETH roots' capital, then pays `backer` its vested, unclaimed
    capital-pool tokens; refuses with the reason (:func:`why_nothing_vests`) when there are
    none."""
    who = checksum(backer, what="--backer")
    run = run_bytes(run_id)
    accrue(chain, run_id)
    why = why_nothing_vests(chain, run_id, who)
    if why is not None:
        raise ConfigError(f"nothing to claim for {who}: {why}")
    before = chain.run_funding.capital_claimed(run, Address(who))
    receipt = chain.transact("RunFunding", "claimVested", run, who)
    after = chain.run_funding.capital_claimed(run, Address(who))
    return {"backer": who, "capital_paid": str(after - before), "tx": tx_hex(receipt)}


def refund(chain: ChainClient, run_id: str, backer: str) -> dict[str, Any]:
    who = checksum(backer, what="--backer")
    receipt = chain.transact("RunFunding", "refund", run_bytes(run_id), who)
    return {"backer": who, "tx": tx_hex(receipt)}
