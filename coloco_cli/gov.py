"""`coloco gov delegate | propose | vote | queue | execute | status | list`: token holders.

Proposals change TrainingConfig through the OpenZeppelin Governor and its Timelock. A proposal is
found again by its id from the Governor's `ProposalCreated` logs, so `queue` and `execute` need
only `--proposal ID`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from eth_utils.crypto import keccak
from rich.table import Table

from coloco_cli.common import (
    DeploymentOpt,
    KeystoreOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    fmt_units,
    load_signer,
    open_chain,
    resolve,
)
from coloco_cli.gov_changes import SetterCall, config_as_dict, parse_sets, setter_calls
from coloco_cli.node import checksum
from protocol.errors import ConfigError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

STATES = ("Pending", "Active", "Canceled", "Defeated", "Succeeded", "Queued", "Expired", "Executed")
DELEGATE_GAS = 250_000
SUPPORT = {"for": 1, "against": 0, "abstain": 2}

ProposalOpt = Annotated[str, typer.Option("--proposal", help="Proposal id (decimal or 0x hex).")]


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
        raise ConfigError(f"--proposal {text!r} is not a number: see `coloco gov list`") from exc


def proposal_state(chain: ChainClient, proposal_id: int) -> str:
    return STATES[int(chain.call("ModelGovernor", "state", proposal_id))]


def list_proposals(chain: ChainClient, from_block: int = 0) -> list[Proposal]:
    """Every proposal from the Governor's ProposalCreated logs, oldest first."""
    events = chain.contract("ModelGovernor").events.ProposalCreated.get_logs(from_block=from_block)
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


def _sender(chain: ChainClient) -> str:
    if chain.account_address is None:
        raise ConfigError("this command sends a transaction: pass --keystore or --private-key")
    return chain.account_address


def delegate_votes(chain: ChainClient, to: str | None = None) -> Any:
    """Delegate the sender's ModelShareToken votes to `to` (default: the sender itself)."""
    target = checksum(to, what="--to") if to else _sender(chain)
    # A fixed limit: eth_estimateGas runs in the latest block, where an ERC20Votes checkpoint
    # written in that same block is updated in place; the mined transaction lands in a new block
    # and pushes new checkpoints, which costs more than the estimate (+25%) allows.
    return chain.transact("ModelShareToken", "delegate", target, gas=DELEGATE_GAS)


def propose_change(chain: ChainClient, sets: list[str], description: str | None = None) -> Proposal:
    """Propose TrainingConfig changes (`['inner-steps=30']`); returns the created proposal."""
    config = chain.contract("TrainingConfig")
    abi = config.abi
    current = config_as_dict(abi, chain.call("TrainingConfig", "current"))
    calls: list[SetterCall] = setter_calls(abi, current, parse_sets(sets))
    targets: list[str] = [str(config.address)] * len(calls)
    values = [0] * len(calls)
    calldatas = [bytes.fromhex(config.encode_abi(c.function, args=list(c.args))[2:]) for c in calls]
    description = description or "coloco: " + "; ".join(c.describe() for c in calls)
    sender = _sender(chain)
    votes = int(chain.call("ModelShareToken", "getVotes", sender))
    threshold = int(chain.call("ModelGovernor", "proposalThreshold"))
    if votes < threshold:
        raise ConfigError(
            f"{sender} has {fmt_units(votes)} votes, the Governor needs "
            f"{fmt_units(threshold)} to propose: claim rewards and `coloco gov delegate` first"
        )
    proposal_id = int(
        chain.call(
            "ModelGovernor", "hashProposal", targets, values, calldatas, keccak(text=description)
        )
    )
    chain.transact("ModelGovernor", "propose", targets, values, calldatas, description)
    return Proposal(
        proposal_id=proposal_id,
        proposer=sender,
        targets=targets,
        values=values,
        calldatas=calldatas,
        description=description,
        vote_start=int(chain.call("ModelGovernor", "proposalSnapshot", proposal_id)),
        vote_end=int(chain.call("ModelGovernor", "proposalDeadline", proposal_id)),
    )


def cast_vote(chain: ChainClient, proposal_id: int, support: str, reason: str = "") -> Any:
    """Vote for/against/abstain on an Active proposal."""
    if support not in SUPPORT:
        raise ConfigError(f"--support {support!r}: choose one of {', '.join(SUPPORT)}")
    state = proposal_state(chain, proposal_id)
    if state == "Pending":
        start = int(chain.call("ModelGovernor", "proposalSnapshot", proposal_id))
        raise ConfigError(
            f"proposal {proposal_id} is Pending: voting opens after block {start} "
            f"(now {chain.block_number()}); wait (on a devnet: cast rpc anvil_mine)"
        )
    if state != "Active":
        raise ConfigError(f"proposal {proposal_id} is {state}, not Active: it takes no votes")
    if reason:
        return chain.transact(
            "ModelGovernor", "castVoteWithReason", proposal_id, SUPPORT[support], reason
        )
    return chain.transact("ModelGovernor", "castVote", proposal_id, SUPPORT[support])


def queue_proposal(chain: ChainClient, proposal_id: int, from_block: int = 0) -> Any:
    """Queue a Succeeded proposal in the Timelock."""
    state = proposal_state(chain, proposal_id)
    if state != "Succeeded":
        end = int(chain.call("ModelGovernor", "proposalDeadline", proposal_id))
        hint = f" (voting ends after block {end})" if state in {"Pending", "Active"} else ""
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
            f"`coloco gov queue --proposal {proposal_id}`"
            if state == "Succeeded"
            else f"proposal {proposal_id} is {state}, only Queued proposals execute"
        )
    eta = int(chain.call("ModelGovernor", "proposalEta", proposal_id))
    now = int(chain.w3.eth.get_block("latest")["timestamp"])
    if now < eta:
        raise ConfigError(
            f"proposal {proposal_id} waits in the Timelock until timestamp {eta} "
            f"({eta - now}s from the last block): try again then"
        )
    p = find_proposal(chain, proposal_id, from_block)
    return chain.transact(
        "ModelGovernor", "execute", p.targets, p.values, p.calldatas, p.description_hash
    )


# --- commands ------------------------------------------------------------------------------------


def _chain(
    rpc_url: str | None,
    deployment: Any,
    keystore: Any = None,
    password_file: Any = None,
    private_key: str | None = None,
    *,
    signer: bool,
) -> tuple[ChainClient, int]:
    ep = resolve(rpc_url, None, deployment)
    account = load_signer(keystore, password_file, private_key) if signer else None
    return open_chain(ep, account), int(ep.deployment().deployment_block)


@app.command()
def delegate(
    *,
    to: Annotated[
        str | None, typer.Option(help="Delegate to this address (default: yourself).")
    ] = None,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Delegate your ModelShareToken votes (needed once before your balance counts as votes).

    Example: coloco gov delegate --keystore holder.json
    """
    chain, _ = _chain(rpc_url, deployment, keystore, password_file, private_key, signer=True)
    delegate_votes(chain, to)
    votes = int(
        chain.call("ModelShareToken", "getVotes", checksum(to) if to else chain.account_address)
    )
    console.print(f"delegated; votes of the delegate now {fmt_units(votes)} CMS")


@app.command()
def propose(
    *,
    set_: Annotated[
        list[str],
        typer.Option("--set", help="NAME=VALUE, e.g. inner-steps=30, outer-lr=0.5 (repeatable)."),
    ],
    description: Annotated[str | None, typer.Option(help="Proposal text.")] = None,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Propose a TrainingConfig change by name.

    Example: coloco gov propose --set inner-steps=30 --description "shorter rounds"
    """
    chain, _ = _chain(rpc_url, deployment, keystore, password_file, private_key, signer=True)
    prop = propose_change(chain, set_, description)
    console.print(f"proposal [bold]{prop.proposal_id}[/] created: {prop.description}")
    console.print(f"voting opens after block {prop.vote_start}, ends at block {prop.vote_end}")
    console.print(f"next: coloco gov vote --proposal {prop.proposal_id} --support for")


@app.command()
def vote(
    *,
    proposal: ProposalOpt,
    support: Annotated[str, typer.Option(help="for, against or abstain.")] = "for",
    reason: Annotated[str, typer.Option(help="Optional reason, stored on chain.")] = "",
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Vote on an Active proposal.

    Example: coloco gov vote --proposal 1234... --support for --keystore holder.json
    """
    chain, _ = _chain(rpc_url, deployment, keystore, password_file, private_key, signer=True)
    pid = parse_proposal_id(proposal)
    cast_vote(chain, pid, support.lower(), reason)
    against, for_, abstain = chain.call("ModelGovernor", "proposalVotes", pid)
    console.print(
        f"voted {support} on {pid}: for {fmt_units(for_)}, against {fmt_units(against)}, "
        f"abstain {fmt_units(abstain)}"
    )


@app.command()
def queue(
    *,
    proposal: ProposalOpt,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Queue a Succeeded proposal in the Timelock.

    Example: coloco gov queue --proposal 1234... --keystore holder.json
    """
    chain, start = _chain(rpc_url, deployment, keystore, password_file, private_key, signer=True)
    pid = parse_proposal_id(proposal)
    queue_proposal(chain, pid, start)
    eta = int(chain.call("ModelGovernor", "proposalEta", pid))
    console.print(f"queued {pid}; executable from timestamp {eta}")


@app.command()
def execute(
    *,
    proposal: ProposalOpt,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
) -> None:
    """Execute a Queued proposal after the Timelock delay: TrainingConfig changes now.

    Example: coloco gov execute --proposal 1234... --keystore holder.json
    """
    chain, start = _chain(rpc_url, deployment, keystore, password_file, private_key, signer=True)
    pid = parse_proposal_id(proposal)
    execute_proposal(chain, pid, start)
    version = int(chain.call("TrainingConfig", "version"))
    console.print(f"executed {pid}; TrainingConfig version is now {version}")


@app.command()
def status(
    *, proposal: ProposalOpt, rpc_url: RpcUrlOpt = None, deployment: DeploymentOpt = None
) -> None:
    """Show a proposal's state, votes and deadlines.

    Example: coloco gov status --proposal 1234...
    """
    chain, start = _chain(rpc_url, deployment, signer=False)
    pid = parse_proposal_id(proposal)
    p = find_proposal(chain, pid, start)
    against, for_, abstain = chain.call("ModelGovernor", "proposalVotes", pid)
    table = Table(title=f"proposal {pid}", show_header=False)
    table.add_row("description", p.description)
    table.add_row("state", proposal_state(chain, pid))
    table.add_row(
        "votes",
        f"for {fmt_units(for_)} / against {fmt_units(against)} / abstain {fmt_units(abstain)}",
    )
    table.add_row("voting", f"blocks {p.vote_start}..{p.vote_end} (now {chain.block_number()})")
    table.add_row(
        "quorum",
        fmt_units(int(chain.call("ModelGovernor", "quorum", p.vote_start)))
        if chain.block_number() > p.vote_start
        else "set at vote start",
    )
    console.print(table)


@app.command("list")
def list_(*, rpc_url: RpcUrlOpt = None, deployment: DeploymentOpt = None) -> None:
    """List every proposal with its state.

    Example: coloco gov list
    """
    chain, start = _chain(rpc_url, deployment, signer=False)
    table = Table(title="proposals")
    for col in ("id", "state", "for", "against", "description"):
        table.add_column(col)
    for p in list_proposals(chain, start):
        against, for_, _ = chain.call("ModelGovernor", "proposalVotes", p.proposal_id)
        table.add_row(
            str(p.proposal_id), proposal_state(chain, p.proposal_id), fmt_units(for_),
            fmt_units(against), p.description,
        )  # fmt: skip
    console.print(table)
