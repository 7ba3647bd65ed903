"""What a token holder does on chain, as functions: the CLI and `coloco demo` both call them.

Proposals change TrainingConfig through the OpenZeppelin Governor and its Timelock. A proposal is
found again by its id from the Governor's `ProposalCreated` logs, so queueing and executing need
only the id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eth_utils.crypto import keccak

from coloco_cli.common import fmt_units
from coloco_cli.gov import bounds
from coloco_cli.gov.changes import SetterCall, parse_sets, setter_calls
from coloco_cli.logs import event_logs
from coloco_cli.node.ops import checksum, utc
from protocol.errors import ConfigError
from protocol.types import Address

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

STATES = ("Pending", "Active", "Canceled", "Defeated", "Succeeded", "Queued", "Expired", "Executed")
DELEGATE_GAS = 250_000
SUPPORT = {"for": 1, "against": 0, "abstain": 2}


@dataclass(frozen=True)
class Proposal:
    """A proposal as created on chain (what queue/execute need to name it again)."""

    proposal_id: int
    proposer: str
    targets: list[str]
    values: list[int]
    calldatas: list[bytes]
    description: str
    vote_start: int
    vote_end: int

    @property
    def description_hash(self) -> bytes:
        return keccak(text=self.description)


def parse_proposal_id(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError as exc:
        raise ConfigError(f"proposal id {text!r} is not a number: see `coloco gov list`") from exc


def resolve_proposal_id(chain: ChainClient, text: str) -> int:
    """A proposal as typed: its full id (decimal or 0x hex) or a unique prefix of the decimal
    digits `coloco gov list` prints (`2423` for a 77-digit id)."""
    exact = parse_proposal_id(text.strip())
    ids = [p.proposal_id for p in list_proposals(chain, int(chain.deployment.deployment_block))]
    if exact in ids:
        return exact
    digits = text.strip()
    matches = [i for i in ids if digits.isdigit() and str(i).startswith(digits)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(
            f"proposal id {digits} is the start of {len(matches)} proposals' ids: type more "
            "digits (see `coloco gov list`)"
        )
    raise ConfigError(f"no proposal {digits} on this Governor: see `coloco gov list`")


def span(seconds: int) -> str:
    """90 -> '1m 30s': a duration as a person reads it."""
    seconds = abs(seconds)
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"),
             (seconds % 3600 // 60, "m"), (seconds % 60, "s")]  # fmt: skip
    shown = [f"{n}{unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0s"


def when(timestamp: int, now: int, *, future: str, past: str) -> str:
    """'2026-12-03 12:55:01 UTC (ends in 1m 30s)': a chain time in UTC and relative to `now`
    (the latest block's timestamp: the Governor's clock)."""
    if timestamp > now:
        return f"{utc(timestamp)} ({future} in {span(timestamp - now)})"
    return f"{utc(timestamp)} ({past} {span(now - timestamp)} ago)"


def chain_now(chain: ChainClient) -> int:
    """The latest block's timestamp: what the Governor's and the Timelock's clocks read."""
    return int(chain.w3.eth.get_block("latest")["timestamp"])


def support_code(support: str) -> int:
    if support not in SUPPORT:
        raise ConfigError(f"--support {support!r}: choose one of {', '.join(SUPPORT)}")
    return SUPPORT[support]


def proposal_state(chain: ChainClient, proposal_id: int) -> str:
    return STATES[chain.model_governor.state(proposal_id)]


def list_proposals(chain: ChainClient, from_block: int = 0) -> list[Proposal]:
    """Every proposal from the Governor's ProposalCreated logs, oldest first."""
    events = event_logs(chain, "ModelGovernor", "ProposalCreated", from_block=from_block)
    return [
        Proposal(
            proposal_id=int(ev.args.proposalId),
            proposer=ev.args.proposer,
            targets=list(ev.args.targets),
            values=[int(v) for v in ev.args.values],
            calldatas=[bytes(c) for c in ev.args.calldatas],
            description=ev.args.description,
            vote_start=int(ev.args.voteStart),
            vote_end=int(ev.args.voteEnd),
        )
        for ev in events
    ]


def find_proposal(chain: ChainClient, proposal_id: int, from_block: int = 0) -> Proposal:
    for prop in list_proposals(chain, from_block):
        if prop.proposal_id == proposal_id:
            return prop
    raise ConfigError(f"no proposal {proposal_id} on this Governor: see `coloco gov list`")


def sender_of(chain: ChainClient) -> str:
    if chain.account_address is None:
        raise ConfigError("this command sends a transaction: pass --keystore or --private-key")
    return chain.account_address


def delegate_votes(chain: ChainClient, to: str | None = None) -> Any:
    """Delegate the sender's ModelShareToken votes to `to` (default: the sender itself)."""
    target = checksum(to, what="--to") if to else sender_of(chain)
    # A fixed limit: eth_estimateGas runs in the latest block, where an ERC20Votes checkpoint
    # written in that same block is updated in place; the mined transaction lands in a new block
    # and pushes new checkpoints, which costs more than the estimate (+25%) allows.
    return chain.transact("ModelShareToken", "delegate", target, gas=DELEGATE_GAS)


def propose_change(
    chain: ChainClient, sets: list[str], description: str | None = None, *, force: bool = False
) -> Proposal:
    """Propose TrainingConfig changes (`['inner-steps=30']`); returns the created proposal.

    Each change is checked first against what TrainingConfig accepts and what it would cause
    (`coloco_cli.gov.bounds.check`): refused with the allowed range before any transaction,
    unless `force`."""
    config = chain.contract("TrainingConfig")
    abi = config.abi
    current = chain.training_config.current()
    changes = parse_sets(sets)
    calls: list[SetterCall] = setter_calls(abi, current, changes)
    bounds.check(chain, changes, calls, force=force)
    targets: list[str] = [str(config.address)] * len(calls)
    calldatas = [bytes.fromhex(config.encode_abi(c.function, args=list(c.args))[2:]) for c in calls]
    description = description or "coloco: " + "; ".join(c.describe() for c in calls)
    return propose_calls(chain, targets, calldatas, description)


def propose_calls(
    chain: ChainClient, targets: list[str], calldatas: list[bytes], description: str
) -> Proposal:
    """Propose calling `targets` with `calldatas` (no value) through the Governor and Timelock;
    refused early when the sender's votes are below the proposal threshold."""
    values = [0] * len(targets)
    sender = sender_of(chain)
    votes = chain.model_share_token.get_votes(Address(sender))
    threshold = chain.model_governor.proposal_threshold()
    if votes < threshold:
        raise ConfigError(
            f"{sender} has {fmt_units(votes)} votes, the Governor needs "
            f"{fmt_units(threshold)} to propose: claim rewards and `coloco gov delegate` first"
        )
    proposal_id = chain.model_governor.hash_proposal(
        targets, values, calldatas, keccak(text=description)
    )
    chain.transact("ModelGovernor", "propose", targets, values, calldatas, description)
    return Proposal(
        proposal_id=proposal_id,
        proposer=sender,
        targets=targets,
        values=values,
        calldatas=calldatas,
        description=description,
        vote_start=chain.model_governor.proposal_snapshot(proposal_id),
        vote_end=chain.model_governor.proposal_deadline(proposal_id),
    )


def voting_power_refusal(chain: ChainClient, proposal_id: int) -> str | None:
    """Why the sender's vote on `proposal_id` would count 0 (None: it counts).

    The Governor counts the votes delegated to the voter at the proposal's snapshot; a vote of 0
    still costs gas and uses up the account's one vote on that proposal."""
    sender = sender_of(chain)
    snapshot = chain.model_governor.proposal_snapshot(proposal_id)
    if int(chain.call("ModelGovernor", "getVotes", sender, snapshot)) > 0:
        return None
    balance = int(chain.call("ModelShareToken", "balanceOf", sender))
    delegate = str(chain.call("ModelShareToken", "delegates", sender))
    if balance == 0:
        held = "holds no CMS"
    elif int(delegate, 16) == 0:
        held = f"holds {fmt_units(balance)} CMS but delegated them to nobody"
    elif delegate.lower() != sender.lower():
        held = f"holds {fmt_units(balance)} CMS but delegated them to {delegate}"
    else:
        held = (
            f"holds {fmt_units(balance)} CMS, but they were not its votes at this proposal's "
            f"snapshot ({utc(snapshot)}): received or delegated after it"
        )
    return (
        f"{sender} has 0 voting power on proposal {proposal_id}: it {held}. A vote would count "
        "0 and use up this account's one vote on the proposal. Delegate first: "
        "`coloco gov delegate` (votes count for proposals created after it); pass --force to "
        "vote anyway"
    )


def cast_vote(
    chain: ChainClient, proposal_id: int, support: str, reason: str = "", *, force: bool = False
) -> Any:
    """Vote for/against/abstain on an Active proposal; refused when the sender's vote would
    count 0 (`voting_power_refusal`), unless `force`."""
    support_code(support)
    state = proposal_state(chain, proposal_id)
    if state == "Pending":
        start = chain.model_governor.proposal_snapshot(proposal_id)
        raise ConfigError(
            f"proposal {proposal_id} is Pending: voting opens after "
            f"{when(start, chain_now(chain), future='opens', past='opened')}, by the chain's "
            "clock; wait (on a devnet: `coloco devnet mine 1 --seconds N`, or cast rpc "
            "evm_increaseTime N, then anvil_mine)"
        )
    if state != "Active":
        raise ConfigError(f"proposal {proposal_id} is {state}, not Active: it takes no votes")
    refusal = voting_power_refusal(chain, proposal_id)
    if refusal and not force:
        raise ConfigError(refusal)
    if refusal:
        log.warning("voting anyway (--force): %s", refusal)
    if reason:
        return chain.transact(
            "ModelGovernor", "castVoteWithReason", proposal_id, SUPPORT[support], reason
        )
    return chain.transact("ModelGovernor", "castVote", proposal_id, SUPPORT[support])


def queue_proposal(chain: ChainClient, proposal_id: int, from_block: int = 0) -> Any:
    """Queue a Succeeded proposal in the Timelock."""
    state = proposal_state(chain, proposal_id)
    if state != "Succeeded":
        end = chain.model_governor.proposal_deadline(proposal_id)
        hint = (
            f" (voting ends {when(end, chain_now(chain), future='ends', past='ended')})"
            if state in {"Pending", "Active"}
            else ""
        )
        raise ConfigError(f"proposal {proposal_id} is {state}, only Succeeded can be queued{hint}")
    p = find_proposal(chain, proposal_id, from_block)
    return chain.transact(
        "ModelGovernor", "queue", p.targets, p.values, p.calldatas, p.description_hash
    )


def execute_proposal(chain: ChainClient, proposal_id: int, from_block: int = 0) -> Any:
    """Execute a Queued proposal once the Timelock delay has passed."""
    state = proposal_state(chain, proposal_id)
    if state != "Queued":
        raise ConfigError(
            f"proposal {proposal_id} is {state}: queue it first with "
            f"`coloco gov queue {proposal_id}`"
            if state == "Succeeded"
            else f"proposal {proposal_id} is {state}, only Queued proposals execute"
        )
    eta = chain.model_governor.proposal_eta(proposal_id)
    now = chain_now(chain)
    if now < eta:
        raise ConfigError(
            f"proposal {proposal_id} waits in the Timelock until {utc(eta)} ({span(eta - now)} "
            "after the last block, by the chain's clock): try again then (on a devnet: "
            f"`coloco devnet mine 1 --seconds {eta - now}`)"
        )
    p = find_proposal(chain, proposal_id, from_block)
    return chain.transact(
        "ModelGovernor", "execute", p.targets, p.values, p.calldatas, p.description_hash
    )
