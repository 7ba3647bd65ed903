"""Typed helpers over the raw calls of :class:`protocol.chain.ChainClient`.

Each method is one contract function with Python types in and out, so callers never index
into web3's tuples. Field orders follow docs/interfaces.md. Each contract's other views are
reached by its name in snake case (``chain.run_funding``: protocol.views); the governed training
settings are typed above this layer, by reference.settings.TrainingSettings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.attestation import ATTESTATION_FIELDS, ComputeAttestation
from protocol.eip712 import (
    Eip712Domain,
    check_address,
    check_bytes32,
    to_checksum_address,
)
from protocol.node_key_proof import NodeKeyProof
from protocol.types import Address, Bytes32, RoundNumber, RunId, TokenUnits, Wei
from protocol.views import (
    CodeRegistryView,
    ModelGovernorView,
    ModelShareTokenView,
    RunFundingView,
    StakeManagerView,
    TrainingConfigView,
)

if TYPE_CHECKING:
    from web3.types import TxReceipt

    from protocol.deployment import Deployment

ZERO_ADDRESS = Address("0x" + "00" * 20)


@dataclass(frozen=True)
class NodeInfo:
    """``StakeManager.nodes(node)``: who operates it, where rewards go, its stake."""

    node: Address
    operator: Address
    payout: Address
    staked: Wei
    unbonding: Wei
    unbonding_ready_at: int

    @property
    def registered(self) -> bool:
        return self.operator != ZERO_ADDRESS


@dataclass(frozen=True)
class RootStatus:
    """``ContributionLedger.rootInfo(root)``: when a rewards root becomes claimable."""

    root: Bytes32
    index: int
    """Order of first commit, from 1 (0: never committed)."""
    finalized_at: int
    """Unix seconds from which claims against it are accepted (the dispute window's end)."""
    revoked: bool
    budget: TokenUnits
    """What all claims together may reach when paying against this root."""

    def state(self, now: int) -> str:
        """'unknown', 'revoked', 'pending' (in its dispute window) or 'claimable'."""
        if self.index == 0:
            return "unknown"
        if self.revoked:
            return "revoked"
        return "pending" if now < self.finalized_at else "claimable"


def attestation_tuple(att: ComputeAttestation) -> tuple[Any, ...]:
    """The Solidity struct as web3 takes it (fields in declaration order)."""
    return tuple(getattr(att, attr) for attr, _, _ in ATTESTATION_FIELDS)


class ChainViews:
    """Mixin: typed helpers; the host class provides ``call``, ``transact`` and ``deployment``."""

    deployment: Deployment

    def call(self, contract: str, fn: str, *args: Any, block: int | str = "latest") -> Any:
        raise NotImplementedError

    def transact(
        self,
        contract: str,
        fn: str,
        *args: Any,
        value: int = 0,
        gas: int | None = None,
        confirmations: int | None = None,
    ) -> TxReceipt:
        raise NotImplementedError

    # --- each contract's views, typed (protocol.views) ---------------------------------------

    @property
    def model_share_token(self) -> ModelShareTokenView:
        return ModelShareTokenView(self)

    @property
    def model_governor(self) -> ModelGovernorView:
        return ModelGovernorView(self)

    @property
    def training_config(self) -> TrainingConfigView:
        """The config's views; reference.settings.TrainingSettings.read decodes the settings."""
        return TrainingConfigView(self)

    @property
    def stake_manager(self) -> StakeManagerView:
        return StakeManagerView(self)

    @property
    def run_funding(self) -> RunFundingView:
        return RunFundingView(self)

    @property
    def code_registry(self) -> CodeRegistryView:
        return CodeRegistryView(self)

    # --- StakeManager -------------------------------------------------------------------------

    def node_info(self, node: Address, *, block: int | str = "latest") -> NodeInfo:
        """The node's record now, or as it stood at ``block``."""
        check_address("node", node)
        operator, payout, staked, unbonding, ready_at = self.call(
            "StakeManager", "nodes", node, block=block
        )
        return NodeInfo(
            node=node,
            operator=Address(to_checksum_address(operator)),
            payout=Address(to_checksum_address(payout)),
            staked=Wei(int(staked)),
            unbonding=Wei(int(unbonding)),
            unbonding_ready_at=int(ready_at),
        )

    def key_proof_domain(self) -> Eip712Domain:
        """The EIP-712 domain node keys sign their ``NodeKeyProof`` under (the StakeManager)."""
        return Eip712Domain(
            chain_id=int(self.deployment.chain_id),
            verifying_contract=self.deployment.address("StakeManager"),
        )

    def node_key_proof(
        self, node: Address, operator: Address, payout: Address, deadline: int
    ) -> NodeKeyProof:
        """The proof ``node`` must sign for ``operator`` (its next nonce read from the chain)."""
        nonce = int(self.call("StakeManager", "nonces", check_address("node", node)))
        return NodeKeyProof(operator=operator, payout=payout, nonce=nonce, deadline=deadline)

    def sign_node_key_proof(
        self, node_key: bytes, operator: Address, payout: Address, deadline: int
    ) -> tuple[Address, NodeKeyProof, bytes]:
        """(node, proof, 65-byte signature): the node key's consent to ``operator``/``payout``."""
        from protocol.signing import address_of_private_key, sign_digest

        node = address_of_private_key(node_key)
        proof = self.node_key_proof(node, operator, payout, deadline)
        return node, proof, sign_digest(proof.digest(self.key_proof_domain()), node_key)

    def register_node(
        self, node_key: bytes, payout: Address, *, operator: Address, lifetime_s: int = 3600
    ) -> TxReceipt:
        """``register`` as ``operator`` (the sender), with the node key's proof of possession,
        valid ``lifetime_s`` seconds from the latest block."""
        now = self.model_share_token.clock()
        node, proof, sig = self.sign_node_key_proof(node_key, operator, payout, now + lifetime_s)
        return self.transact(
            "StakeManager", "register", node, check_address("payout", payout), proof.deadline, sig
        )

    def is_active(self, node: Address) -> bool:
        return bool(self.call("StakeManager", "isActive", check_address("node", node)))

    # --- ContributionLedger -------------------------------------------------------------------

    def attestation_domain(self) -> Eip712Domain:
        """The EIP-712 domain attestations for this deployment are signed under."""
        return Eip712Domain(
            chain_id=int(self.deployment.chain_id),
            verifying_contract=self.deployment.address("ContributionLedger"),
        )

    def last_round(self, run_id: RunId) -> RoundNumber:
        return RoundNumber(
            int(self.call("ContributionLedger", "lastRound", check_bytes32("run_id", run_id)))
        )

    def has_committed(self, run_id: RunId) -> bool:
        return bool(
            self.call("ContributionLedger", "hasCommitted", check_bytes32("run_id", run_id))
        )

    def checkpoint_of(self, run_id: RunId, round: RoundNumber) -> Bytes32:
        value = self.call(
            "ContributionLedger", "checkpointOf", check_bytes32("run_id", run_id), round
        )
        return Bytes32(bytes(value))

    def root_status(self, root: Bytes32) -> RootStatus:
        """Finality of a rewards root: pending for the dispute window, then claimable."""
        index, finalized_at, revoked, budget = self.call(
            "ContributionLedger", "rootInfo", check_bytes32("root", root)
        )
        return RootStatus(
            root=root,
            index=int(index),
            finalized_at=int(finalized_at),
            revoked=bool(revoked),
            budget=TokenUnits(int(budget)),
        )

    def dispute_window(self) -> int:
        """Seconds a new rewards root stays pending (revocable) before it pays."""
        return int(self.call("ContributionLedger", "disputeWindow"))

    def total_budget(self) -> TokenUnits:
        """Every reward total committed so far: the most all claims together can ever mint."""
        return TokenUnits(int(self.call("ContributionLedger", "totalBudget")))

    def hash_attestation(self, att: ComputeAttestation) -> Bytes32:
        """The contract's EIP-712 digest of ``att`` (compare with ``att.digest(domain)``)."""
        return Bytes32(
            bytes(self.call("ContributionLedger", "hashAttestation", attestation_tuple(att)))
        )

    def recover_attestation_onchain(self, att: ComputeAttestation, signature: bytes) -> Address:
        """``verifyAttestation``: the signer (the contract reverts unless it is ``att.node``)."""
        signer = self.call(
            "ContributionLedger", "verifyAttestation", attestation_tuple(att), signature
        )
        return Address(to_checksum_address(signer))

    def commit_round(
        self,
        run_id: RunId,
        round: RoundNumber,
        *,
        rewards_root: Bytes32,
        checkpoint_hash: Bytes32,
        total_work: int,
        attestations_root: Bytes32,
        reward_total: int = 0,
    ) -> TxReceipt:
        """``commitRound`` (COMMITTER_ROLE): one root and checkpoint hash per round; the round's
        ``reward_total`` (<= rewardPerRound) joins the budget claims are bounded by."""
        return self.transact(
            "ContributionLedger",
            "commitRound",
            check_bytes32("run_id", run_id),
            round,
            check_bytes32("rewards_root", rewards_root),
            check_bytes32("checkpoint_hash", checkpoint_hash),
            total_work,
            check_bytes32("attestations_root", attestations_root),
            reward_total,
        )

    # --- RewardDistributor --------------------------------------------------------------------

    def claim(self, account: Address, cumulative: int, proof: Sequence[bytes]) -> TxReceipt:
        """Claim everything owed to ``account`` up to ``cumulative`` (tokens go to ``account``)."""
        return self.transact(
            "RewardDistributor", "claim", check_address("account", account), cumulative, list(proof)
        )

    def claimed(self, account: Address) -> TokenUnits:
        return TokenUnits(
            int(self.call("RewardDistributor", "claimed", check_address("account", account)))
        )

    def token_balance(self, account: Address) -> TokenUnits:
        return TokenUnits(
            int(self.call("ModelShareToken", "balanceOf", check_address("account", account)))
        )
