"""The demo's contributors and token holders: claim rewards, then govern TrainingConfig.

Claims are `coloco rewards claim` (proof from the ledger, claim on chain); the vote is
`coloco gov delegate | propose | vote | queue | execute`. On the devnet, the waits for the voting
delay, voting period and Timelock delay (seconds: a timestamp clock) are skipped with
`coloco devnet mine --seconds`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from coloco_cli.demo.actors import payout_key
from coloco_cli.gov.ops import proposal_state
from coloco_cli.rewards.ops import fetch_owed
from protocol.errors import ColocoError
from protocol.types import Address
from reference.settings import TrainingSettings

if TYPE_CHECKING:
    from coloco_cli.demo.actors import Actor
    from coloco_cli.demo.net import DemoNet
    from coloco_cli.demo.shell import Secret, Shell

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
    wire_format_before: str = ""
    wire_format_after: str = ""
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


def claim_all(net: DemoNet, shell: Shell, actors: list[Actor]) -> list[dict[str, Any]]:
    """Every payout address owed something claims it with its own key (`coloco rewards claim`)."""
    claims = []
    for actor in actors:
        owed = fetch_owed(net.ledger_url, actor.payout_address)
        already = int(net.chain().claimed(Address(actor.payout_address)))
        if owed.cumulative_amount <= already:
            continue
        result = shell.json(
            "rewards", "claim", actor.payout_address, "--private-key", payout_key(actor),
            "--wait-final",
        )  # fmt: skip
        claims.append(
            {
                "node": actor.node_address,
                "account": result["account"],
                "cumulative_amount": str(result["cumulative_amount"]),
                "paid": str(result["paid"]),
                "balance": str(result["balance"]),
            }
        )
        log.info(
            "%s claimed %s (balance %s)", actor.payout_address, result["paid"], result["balance"]
        )
    return claims


def govern(net: DemoNet, shell: Shell, holders: list[Actor], sets: list[str]) -> GovOutcome:
    """Propose `sets` (e.g. ['inner-steps=30']), vote yes with every holder, queue, execute.

    Each step is the holder's `coloco gov ...` command; the devnet's clock is moved past the
    voting delay, the voting period and the Timelock delay with `coloco devnet mine --seconds`.
    """
    gov = net.deployment.governance
    voting_delay = int(gov.get("voting_delay", 1))
    voting_period = int(gov.get("voting_period", 20))
    timelock_delay = int(gov.get("timelock_delay", 1))
    viewer = net.chain()
    before = viewer.training_config.version()
    settings_before = TrainingSettings.read(viewer)

    delegations = []
    if len(holders) >= 3:  # the last holder lends its votes to the first (`coloco gov delegate`)
        giver, taker = holders[-1], holders[0]
        shell.run(
            "gov", "delegate", "--to", taker.payout_address, "--private-key", payout_key(giver)
        )
        delegations.append({"from": giver.payout_address, "to": taker.payout_address})
    shell.run("devnet", "mine", "1", "--seconds", "1")  # the delegation precedes the snapshot
    description = "coloco demo: " + ", ".join(sets)
    sets_args: list[str | Secret] = [w for item in sets for w in ("--set", item)]
    prop = shell.json(
        "gov", "propose", *sets_args, "--description", description,
        "--private-key", payout_key(holders[0]),
    )  # fmt: skip
    proposal_id = int(prop["proposal_id"])
    shell.run("devnet", "mine", "1", "--seconds", str(voting_delay + 1))
    voters = []
    for holder in holders:
        if viewer.model_share_token.get_votes(Address(holder.payout_address)) == 0:
            continue
        shell.run(
            "gov", "vote", str(proposal_id), "--support", "for",
            "--reason", "demo: longer rounds, fewer bytes a round",
            "--private-key", payout_key(holder),
        )  # fmt: skip
        voters.append(holder.payout_address)
    shell.run("devnet", "mine", "1", "--seconds", str(voting_period + 1))
    state = proposal_state(viewer, proposal_id)
    if state != "Succeeded":
        raise ColocoError(f"demo proposal {proposal_id} ended {state}, not Succeeded")
    shell.run("gov", "queue", str(proposal_id), "--private-key", payout_key(holders[0]))
    shell.run("devnet", "mine", "1", "--seconds", str(timelock_delay + 1))
    shell.run("gov", "execute", str(proposal_id), "--private-key", payout_key(holders[0]))
    tally = viewer.model_governor.proposal_votes(proposal_id)
    settings_after = TrainingSettings.read(viewer)
    return GovOutcome(
        proposal_id=proposal_id,
        description=description,
        change=sets,
        state=proposal_state(viewer, proposal_id),
        votes_for=int(tally.for_votes),
        votes_against=int(tally.against_votes),
        voters=voters,
        delegations=delegations,
        config_version_before=before,
        config_version_after=settings_after.version,
        inner_steps_before=settings_before.inner_steps,
        inner_steps_after=settings_after.inner_steps,
        wire_format_before=settings_before.wire_format.label,
        wire_format_after=settings_after.wire_format.label,
        executed_block=viewer.block_number(),
    )
