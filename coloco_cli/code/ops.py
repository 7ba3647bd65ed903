"""Code contributions, as functions (the CLI and the demo call them).

Anyone submits a contribution to a run (`CodeRegistry.submit`: repository URI, commit hash,
description URI); the review committee approves an amount from the run's code pool within its
budget, or rejects with a reason; amounts above the vote threshold need a governance proposal
calling `approveByVote`; an approved contribution's tokens are claimed from the escrow.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from coloco_cli.common import fmt_units
from coloco_cli.fund.ops import run_bytes, split_fix, split_text
from coloco_cli.tx import tx_hex
from protocol.errors import ConfigError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

STATUS = ("none", "pending", "approved", "rejected", "claimed")
HINTS = {
    "AmountNeedsVote": (
        "above the committee's threshold: propose it to governance with "
        "`coloco code propose ID AMOUNT`"
    ),
    "CommitteeBudgetExceeded": "the committee's budget for this period is spent: wait or vote",
    "SelfApproval": (
        "a committee member never approves its own submission: another member does, or a vote "
        "(`coloco code propose ID AMOUNT`)"
    ),
    "AlreadyDecided": "this contribution was already approved or rejected",
    "CodePoolExceeded": (
        "the run's code pool (code/compute of the compute rewards its rounds committed) holds "
        "less than approved + amount: wait for more rounds; if the ownership split gives code 0 "
        "basis points it never grows (`coloco devnet deploy --ownership-split` on a devnet, "
        "else a proposal calling TrainingConfig.setOwnershipSplit)"
    ),
    "AccessControlUnauthorizedAccount": (
        "only a member of CodeRegistry's code committee (COMMITTEE_ROLE) approves or rejects; "
        "governance grants the role (CodeRegistry.grantRole by a proposal)"
    ),
    "UnknownRun": "the ledger has not committed this run yet",
    "NotClaimable": "only an approved, unclaimed contribution pays",
}


def commit_bytes(commit: str) -> bytes:
    try:
        raw = bytes.fromhex(commit.removeprefix("0x"))
    except ValueError:
        raw = b""
    if len(raw) not in (20, 32) or not any(raw):
        raise ConfigError(f"commit {commit!r} is not a git SHA-1 (40 hex) or SHA-256 (64 hex)")
    return raw.ljust(32, b"\0")


def submit(
    chain: ChainClient, run_id: str, repo: str, commit: str, description: str
) -> dict[str, Any]:
    receipt = chain.transact(
        "CodeRegistry", "submit", run_bytes(run_id), repo, commit_bytes(commit), description
    )
    event = chain.contract("CodeRegistry").events.Submitted().process_receipt(receipt)
    return {"id": int(event[0]["args"]["id"]), "tx": tx_hex(receipt)}


def commit_hex(raw: bytes) -> str:
    """The commit as submitted: a git SHA-1 comes back as its 40 hex digits, not zero-padded to
    the contract's 32 bytes (a SHA-256 ending in 12 zero bytes is not a real hash)."""
    return "0x" + (raw[:20] if not any(raw[20:]) else raw).hex()


def _details(chain: ChainClient, cid: int, submitted: Any, reason: str | None) -> dict[str, Any]:
    """One contribution's fields, from the chain's state and its `Submitted` event: the one
    definition `code show` and `code list` print."""
    c, run = chain.code_registry.contribution_of(cid)
    if c.status == 0:
        raise ConfigError(f"no code contribution has id {cid}: see `coloco code list`")
    a = submitted["args"]
    out = {
        "id": cid,
        "run_id": "0x" + bytes(run).hex(),
        "contributor": c.contributor,
        "status": STATUS[c.status],
        "amount": str(c.amount),
        "repository_uri": a["repositoryUri"],
        "commit": commit_hex(bytes(a["commitHash"])),
        "description_uri": a["descriptionUri"],
    }
    if reason is not None:
        out["reason"] = reason
    return out


def _events(chain: ChainClient, filters: dict[str, Any]) -> tuple[list[Any], dict[int, str]]:
    reg = chain.contract("CodeRegistry")
    start = chain.deployment.deployment_block
    subs = reg.events.Submitted().get_logs(from_block=start, argument_filters=filters)
    rejected = {
        int(e["args"]["id"]): e["args"]["reason"]
        for e in reg.events.Rejected().get_logs(from_block=start, argument_filters=filters)
    }
    return list(subs), rejected


def show(chain: ChainClient, cid: int) -> dict[str, Any]:
    """Contribution `cid`: run, contributor, status, amount, repository, commit, description
    (and the committee's reason if it was rejected)."""
    subs, rejected = _events(chain, {"id": cid})
    if not subs:
        raise ConfigError(f"no code contribution has id {cid}: see `coloco code list`")
    return _details(chain, cid, subs[0], rejected.get(cid))


def list_all(chain: ChainClient, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every submission (from the events), with its current status and decision."""
    filters = {"runId": run_bytes(run_id)} if run_id else {}
    subs, rejected = _events(chain, filters)
    return [
        _details(chain, int(e["args"]["id"]), e, rejected.get(int(e["args"]["id"]))) for e in subs
    ]


log = logging.getLogger(__name__)


def check_committee(chain: ChainClient) -> None:
    """Refuses a sender without COMMITTEE_ROLE before any transaction, naming the role and who
    grants it (the contract would revert AccessControlUnauthorizedAccount with the role's
    hash)."""
    registry = chain.contract("CodeRegistry").functions
    sender = chain.account_address
    if registry.hasRole(registry.COMMITTEE_ROLE().call(), sender).call():
        return
    raise ConfigError(
        f"{sender} is not on the code committee: only holders of CodeRegistry's COMMITTEE_ROLE "
        "approve or reject contributions; governance (the Timelock, CodeRegistry's admin) "
        "grants it with a proposal calling CodeRegistry.grantRole(COMMITTEE_ROLE, member), "
        "and on a devnet `coloco devnet deploy --code-committee ADDRESS|NAME` appoints members "
        "(default: the deployer, `coloco devnet key 0`); amounts can also be paid by a vote: "
        "`coloco code propose ID AMOUNT`"
    )


def pool_problem(chain: ChainClient, cid: int, amount: int) -> tuple[str, bool] | None:
    """Why approving `amount` for contribution `cid` would revert CodePoolExceeded now, and
    whether the pool can ever hold it without a change of the ownership split; None if it fits."""
    _, run = chain.code_registry.contribution_of(cid)
    registry = chain.contract("CodeRegistry").functions
    pool = int(registry.codePool(bytes(run)).call())
    approved = int(registry.approvedOf(bytes(run)).call())
    if approved + amount <= pool:
        return None
    if chain.training_config.ownership_split()[1] == 0:
        return (
            f"the code pool of run 0x{bytes(run).hex()} is {fmt_units(pool)} CMS and never "
            f"grows: the ownership split gives code nothing ({split_text(chain)}); "
            + split_fix("code"),
            True,
        )
    return (
        f"the code pool of run 0x{bytes(run).hex()} holds {fmt_units(pool)} CMS, "
        f"{fmt_units(approved)} already approved: at most {fmt_units(max(pool - approved, 0))} "
        f"CMS more now, not {fmt_units(amount)}; it grows with each committed round "
        f"(the ownership split: {split_text(chain)})",
        False,
    )


def approve(chain: ChainClient, cid: int, amount: int) -> dict[str, Any]:
    check_committee(chain)
    threshold = int(chain.contract("CodeRegistry").functions.voteThreshold().call())
    # above the threshold the contract's AmountNeedsVote says what to do (`code propose`)
    problem = pool_problem(chain, cid, amount) if amount <= threshold else None
    if problem is not None:
        raise ConfigError(
            f"contribution #{cid} cannot be paid {fmt_units(amount)} CMS: {problem[0]}"
        )
    return {
        "id": cid,
        "amount": str(amount),
        "tx": tx_hex(chain.transact("CodeRegistry", "approve", cid, amount)),
    }


def reject(chain: ChainClient, cid: int, reason: str) -> dict[str, Any]:
    check_committee(chain)
    return {
        "id": cid,
        "reason": reason,
        "tx": tx_hex(chain.transact("CodeRegistry", "reject", cid, reason)),
    }


def claim(chain: ChainClient, cid: int) -> dict[str, Any]:
    shown = show(chain, cid)
    tx = tx_hex(chain.transact("CodeRegistry", "claim", cid))
    return {"id": cid, "amount": shown["amount"], "contributor": shown["contributor"], "tx": tx}


def propose_approval(
    chain: ChainClient, cid: int, amount: int, description: str | None = None
) -> dict[str, Any]:
    """A governance proposal calling CodeRegistry.approveByVote(cid, amount): for amounts above
    the committee's threshold (then `coloco gov vote | queue | execute` and `coloco code claim`)."""
    from coloco_cli.gov.ops import propose_calls

    if amount <= 0:
        raise ConfigError("the amount must be more than zero")
    show(chain, cid)  # an unknown id is refused here, not after a vote
    problem = pool_problem(chain, cid, amount)
    if problem is not None and problem[1]:  # the vote would pass and its execution revert
        raise ConfigError(f"nothing was proposed: {problem[0]}")
    if problem is not None:
        log.warning("contribution #%d: %s; the vote executes only once it does", cid, problem[0])
    registry = chain.contract("CodeRegistry")
    call = registry.encode_abi("approveByVote", args=[cid, amount])
    text = description or f"coloco: pay code contribution #{cid} {amount} units from the code pool"
    prop = propose_calls(chain, [str(registry.address)], [bytes.fromhex(call[2:])], text)
    return {"id": cid, "amount": str(amount), "proposal_id": str(prop.proposal_id),
            "description": prop.description, "vote_start": prop.vote_start,
            "vote_end": prop.vote_end}  # fmt: skip
