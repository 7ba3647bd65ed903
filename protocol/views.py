"""Typed read access to each contract: ``chain.run_funding.backer_of(run, who)``.

One class per contract, reached from any :class:`protocol.chain.ChainClient` by the contract's
name in snake case (``chain.model_governor``, ``chain.stake_manager``, ...). Each method is one
view function of that contract, named as the ABI names it in snake case (``proposalVotes`` ->
``proposal_votes``; tests/protocol/test_views.py holds every method to the ABI), with Python
types in and out. A struct comes back as a dataclass whose fields are the ABI's names
(protocol.abi_struct: decoded by name, refused when the two lists differ), never a tuple to index.

The views that other parts used before these classes (``node_info``, ``claimed``,
``token_balance``, ...) stay on :class:`protocol.chain_views.ChainViews`; the governed training
settings are decoded by :class:`reference.settings.TrainingSettings` from
:meth:`TrainingConfigView.current`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from protocol.abi_struct import as_dataclass, returned
from protocol.eip712 import check_address, check_bytes32
from protocol.types import Address, Bytes32, RunId, TokenUnits, Wei

T = TypeVar("T")


class Caller(Protocol):
    """What a view needs of its chain: :meth:`protocol.chain.ChainClient.call`."""

    def call(self, contract: str, fn: str, *args: Any, block: int | str = "latest") -> Any: ...


class ContractView:
    """A contract's view functions over a :class:`Caller`; subclasses name the ``CONTRACT``."""

    CONTRACT: ClassVar[str]

    def __init__(self, chain: Caller) -> None:
        self.chain = chain

    def _call(self, fn: str, *args: Any, block: int | str = "latest") -> Any:
        return self.chain.call(self.CONTRACT, fn, *args, block=block)

    def _named(self, fn: str, *args: Any, block: int | str = "latest") -> dict[str, Any]:
        return returned(self.CONTRACT, fn, self._call(fn, *args, block=block))

    def _struct(self, cls: type[T], fn: str, *args: Any) -> T:
        return as_dataclass(cls, self._named(fn, *args), where=f"{self.CONTRACT}.{fn}")


# --- ModelShareToken / ModelGovernor ----------------------------------------------------------


class ModelShareTokenView(ContractView):
    CONTRACT = "ModelShareToken"

    def get_votes(self, account: Address) -> TokenUnits:
        """The votes ``account`` holds now (its own balance once delegated, plus delegations)."""
        return TokenUnits(int(self._call("getVotes", check_address("account", account))))

    def total_supply(self) -> TokenUnits:
        return TokenUnits(int(self._call("totalSupply")))

    def clock(self) -> int:
        """The token's clock (block timestamp, ERC-6372): what deadlines and votes count in."""
        return int(self._call("clock"))


@dataclass(frozen=True)
class ProposalVotes:
    """``ModelGovernor.proposalVotes``: the tally so far, in token units."""

    against_votes: TokenUnits
    for_votes: TokenUnits
    abstain_votes: TokenUnits


class ModelGovernorView(ContractView):
    CONTRACT = "ModelGovernor"

    def state(self, proposal_id: int) -> int:
        """OpenZeppelin's ProposalState number (0 Pending .. 7 Executed)."""
        return int(self._call("state", proposal_id))

    def proposal_votes(self, proposal_id: int) -> ProposalVotes:
        return self._struct(ProposalVotes, "proposalVotes", proposal_id)

    def proposal_snapshot(self, proposal_id: int) -> int:
        """The timepoint votes are counted at (voting starts after it)."""
        return int(self._call("proposalSnapshot", proposal_id))

    def proposal_deadline(self, proposal_id: int) -> int:
        """The timepoint voting ends (late-quorum protection may extend it)."""
        return int(self._call("proposalDeadline", proposal_id))

    def proposal_eta(self, proposal_id: int) -> int:
        """When a queued proposal may execute (0: not queued)."""
        return int(self._call("proposalEta", proposal_id))

    def proposal_threshold(self) -> TokenUnits:
        """The votes a proposer needs."""
        return TokenUnits(int(self._call("proposalThreshold")))

    def quorum(self, timepoint: int) -> TokenUnits:
        return TokenUnits(int(self._call("quorum", timepoint)))

    def hash_proposal(
        self,
        targets: Sequence[str],
        values: Sequence[int],
        calldatas: Sequence[bytes],
        description_hash: bytes,
    ) -> int:
        """The id a proposal of these actions gets (pure: nothing is read from state)."""
        args = (list(targets), list(values), list(calldatas), description_hash)
        return int(self._call("hashProposal", *args))


# --- TrainingConfig -----------------------------------------------------------------------------


class TrainingConfigView(ContractView):
    CONTRACT = "TrainingConfig"

    def version(self, *, block: int | str = "latest") -> int:
        """Bumped by every setter: what an attestation's ``configVersion`` names."""
        return int(self._call("version", block=block))

    def current(self, *, block: int | str = "latest") -> dict[str, Any]:
        """The ``Config`` struct by ABI name (reference.settings.TrainingSettings types it)."""
        return self._named("current", block=block)

    def min_stake(self) -> Wei:
        return Wei(int(self._call("minStake")))

    def pool_rewards(self) -> tuple[TokenUnits, TokenUnits, TokenUnits]:
        """(compute, code, capital): ``rewardPerRound`` split by the ownership split."""
        compute, code, capital = self._call("poolRewards")
        return TokenUnits(int(compute)), TokenUnits(int(code)), TokenUnits(int(capital))

    def ownership_split(self) -> tuple[int, int, int]:
        """(compute, code, capital) in basis points, summing to 10000."""
        compute, code, capital = self._call("ownershipSplit")
        return int(compute), int(code), int(capital)


# --- StakeManager ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlashProposal:
    """``StakeManager.slashProposal``: an optimistic slash and where it stands."""

    node_id: int
    executable_at: int
    status: int
    """0 none, then the contract's SlashStatus order (coloco_cli/slash names them)."""
    reporter: Address
    amount: Wei
    evidence_hash: Bytes32


class StakeManagerView(ContractView):
    CONTRACT = "StakeManager"

    def node_id_of(self, node: Address) -> int:
        """The node's id, kept across key rotations (0: never registered)."""
        return int(self._call("nodeIdOf", check_address("node", node)))

    def is_frozen(self, node: Address) -> bool:
        """Whether a pending slash proposal holds the node's stake (no unstaking meanwhile)."""
        return bool(self._call("isFrozen", check_address("node", node)))

    def retired(self, node: Address) -> bool:
        """Whether ``node`` is a retired key (rotated away from)."""
        return bool(self._call("retired", check_address("node", node)))

    def proposal_count(self) -> int:
        """Slash proposals so far; ids run from 1 to this."""
        return int(self._call("proposalCount"))

    def slash_proposal(self, proposal_id: int) -> SlashProposal:
        return self._struct(SlashProposal, "slashProposal", proposal_id)


# --- RunFunding / CodeRegistry -----------------------------------------------------------------


@dataclass(frozen=True)
class FundedRun:
    """``RunFunding.runOf``: a run's ETH and capital-pool accounting (wei and token units)."""

    funding_end: int
    cancelled_at: int
    last_round: int
    has_round: bool
    total_deposited: Wei
    weighted_time: int
    eth_committed: Wei
    eth_paid: Wei
    capital_pool: TokenUnits
    eth_per_round: Wei
    refund_pool: Wei
    refunded: Wei
    pending_until: int
    """When the run's last ETH root stops being revocable (a cancelled run refunds from then)."""


@dataclass(frozen=True)
class Backer:
    """``RunFunding.backerOf``: what one backer deposited, and its time-weighted deposit."""

    deposited: Wei
    weighted_time: int


class RunFundingView(ContractView):
    CONTRACT = "RunFunding"

    def run_of(self, run_id: bytes) -> FundedRun:
        return self._struct(FundedRun, "runOf", check_bytes32("run_id", run_id))

    def backer_of(self, run_id: bytes, backer: Address) -> Backer:
        return self._struct(Backer, "backerOf", *self._key(run_id, backer))

    def entitlement(self, run_id: bytes, backer: Address) -> TokenUnits:
        """The backer's share of the capital pool, vested or not."""
        return TokenUnits(int(self._call("entitlement", *self._key(run_id, backer))))

    def vested(self, run_id: bytes, backer: Address) -> TokenUnits:
        return TokenUnits(int(self._call("vested", *self._key(run_id, backer))))

    def capital_claimed(self, run_id: bytes, backer: Address) -> TokenUnits:
        return TokenUnits(int(self._call("capitalClaimed", *self._key(run_id, backer))))

    def eth_claimed(self, run_id: bytes, account: Address) -> Wei:
        """ETH ``account`` was paid so far for compute in the run (cumulative)."""
        return Wei(int(self._call("ethClaimed", *self._key(run_id, account))))

    @staticmethod
    def _key(run_id: bytes, account: Address) -> tuple[bytes, Address]:
        return check_bytes32("run_id", run_id), check_address("account", account)


@dataclass(frozen=True)
class CodeContribution:
    """``CodeRegistry.contributionOf``'s struct: who submitted, its status, the award."""

    contributor: Address
    status: int
    """0 none, then the contract's Status order (coloco_cli/code names them)."""
    amount: TokenUnits


class CodeRegistryView(ContractView):
    CONTRACT = "CodeRegistry"

    def code_pool(self, run_id: bytes) -> TokenUnits:
        """What is left of the run's code pool for approved contributions."""
        return TokenUnits(int(self._call("codePool", check_bytes32("run_id", run_id))))

    def contribution_of(self, contribution_id: int) -> tuple[CodeContribution, RunId]:
        """The contribution and the run it was submitted to."""
        c, run_id = self._named("contributionOf", contribution_id).values()
        where = f"{self.CONTRACT}.contributionOf"
        return as_dataclass(CodeContribution, c, where=where), RunId(run_id)
