"""The demo's contributors and token holders: claim rewards, then govern TrainingConfig.

Claims go through `coloco rewards claim`'s code path (proof from the ledger, claim on chain);
the vote goes through `coloco gov propose | vote | queue | execute`'s. On the devnet, the waits
for the voting delay, voting period and Timelock delay (seconds: a timestamp clock) are
skipped with anvil's `evm_increaseTime`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from coloco_cli.gov.ops import (
    cast_vote,
    delegate_votes,
    execute_proposal,
    proposal_state,
    propose_change,
    queue_proposal,
)
from coloco_cli.rewards.ops import claim_rewards, fetch_owed
from protocol.errors import ColocoError

if TYPE_CHECKING:
    from coloco_cli.demo.actors import Actor
    from coloco_cli.demo.net import DemoNet

log = logging.getLogger(__name__)


@dataclass
class GovOutcome:
    """What the governance vote did."""

    proposal_id: int
    description: str
    change: list[str]
    state: str
    votes_for: int
    votes_against: int
    voters: list[str] = field(default_factory=list)
    delegations: list[dict[str, str]] = field(default_factory=list)
    config_version_before: int = 0
    config_version_after: int = 0
    inner_steps_before: int = 0
    inner_steps_after: int = 0
    executed_block: int = 0

    @property
    def executed(self) -> bool:
        return self.state == "Executed"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["proposal_id"] = str(self.proposal_id)
        data["votes_for"] = str(self.votes_for)
        data["votes_against"] = str(self.votes_against)
        return data


def claim_all(net: DemoNet, actors: list[Actor]) -> list[dict[str, Any]]:
    """Every payout address owed something claims it with its own key."""
    claims = []
    for actor in actors:
        owed = fetch_owed(net.ledger_url, actor.payout_address)
        chain = net.chain(actor.payout_key)
        already = int(chain.call("RewardDistributor", "claimed", actor.payout_address))
        if owed.cumulative_amount <= already:
            continue
        result = claim_rewards(chain, net.ledger_url, actor.payout_address, wait_pending=True)
        claims.append(
            {
                "node": actor.node_address,
                "account": result.account,
                "cumulative_amount": str(result.cumulative_amount),
                "paid": str(result.paid),
                "balance": str(result.balance),
            }
        )
        log.info("%s claimed %d (balance %d)", actor.payout_address, result.paid, result.balance)
    return claims


def govern(net: DemoNet, holders: list[Actor], sets: list[str]) -> GovOutcome:
    """Propose `sets` (e.g. ['inner-steps=30']), vote yes with every holder, queue, execute."""
    gov = net.deployment.governance
    voting_delay = int(gov.get("voting_delay", 1))
    voting_period = int(gov.get("voting_period", 20))
    timelock_delay = int(gov.get("timelock_delay", 1))
    viewer = net.chain()
    before = int(viewer.call("TrainingConfig", "version"))
    inner_before = int(viewer.training_config().inner_steps)

    delegations = []
    if len(holders) >= 3:  # the last holder lends its votes to the first (`coloco gov delegate`)
        giver, taker = holders[-1], holders[0]
        delegate_votes(net.chain(giver.payout_key), taker.payout_address)
        delegations.append({"from": giver.payout_address, "to": taker.payout_address})
        log.info("%s delegated its votes to %s", giver.payout_address, taker.payout_address)
    net.advance_time(1)  # the delegation's timestamp is before the proposal's snapshot
    proposer = net.chain(holders[0].payout_key)
    prop = propose_change(proposer, sets, "coloco demo: " + ", ".join(sets))
    log.info("proposal %d created: %s", prop.proposal_id, prop.description)
    net.advance_time(voting_delay + 1)
    voters = []
    for holder in holders:
        chain = net.chain(holder.payout_key)
        if int(chain.call("ModelShareToken", "getVotes", holder.payout_address)) == 0:
            continue
        cast_vote(chain, prop.proposal_id, "for", "demo: longer rounds, less communication")
        voters.append(holder.payout_address)
    net.advance_time(voting_period + 1)
    state = proposal_state(viewer, prop.proposal_id)
    if state != "Succeeded":
        raise ColocoError(f"demo proposal {prop.proposal_id} ended {state}, not Succeeded")
    queue_proposal(proposer, prop.proposal_id, net.deployment.deployment_block)
    net.advance_time(timelock_delay + 1)
    execute_proposal(proposer, prop.proposal_id, net.deployment.deployment_block)
    against, for_, _ = viewer.call("ModelGovernor", "proposalVotes", prop.proposal_id)
    return GovOutcome(
        proposal_id=prop.proposal_id,
        description=prop.description,
        change=sets,
        state=proposal_state(viewer, prop.proposal_id),
        votes_for=int(for_),
        votes_against=int(against),
        voters=voters,
        delegations=delegations,
        config_version_before=before,
        config_version_after=int(viewer.call("TrainingConfig", "version")),
        inner_steps_before=inner_before,
        inner_steps_after=int(viewer.training_config().inner_steps),
        executed_block=viewer.block_number(),
    )
