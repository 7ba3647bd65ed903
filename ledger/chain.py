"""The ledger's one door to the chain: reads, event logs, and the committer's transactions.

Built on web3.py with the deployment JSON (docs/interfaces.md) and forge's ABIs. Sending and
waiting are separate steps so settlement can record the transaction hash in between.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from eth_account import Account
from web3 import Web3
from web3.exceptions import ContractLogicError, TransactionNotFound

from protocol.deployment import Deployment, abi
from protocol.eip712 import Eip712Domain
from protocol.errors import ChainError, ContractRevertError, DeploymentError, RpcUnavailableError
from protocol.types import Address

log = logging.getLogger(__name__)

INDEXED_CONTRACTS = ("StakeManager", "ContributionLedger", "TrainingConfig")


@dataclass(frozen=True)
class NodeRecord:
    address: str
    operator: str
    payout: str
    staked: int
    unbonding: int

    @property
    def registered(self) -> bool:
        return int(self.operator, 16) != 0


@dataclass(frozen=True)
class ConfigView:
    version: int
    min_stake: int
    reward_per_round: int
    inner_steps: int
    outer_lr_e6: int
    data_mixture: tuple[int, ...] = (10_000,)


@dataclass(frozen=True)
class ChainEvent:
    contract: str
    name: str
    args: dict[str, Any]
    block_number: int
    tx_hash: str
    log_index: int


class LedgerChain:
    """Chain access for the ledger (indexer reads, settlement writes)."""

    def __init__(
        self, rpc_url: str, deployment_path: Path | Deployment, committer_key: bytes | None
    ) -> None:
        deployment = (
            deployment_path
            if isinstance(deployment_path, Deployment)
            else Deployment.load(deployment_path)
        )
        self.deployment = deployment
        self.chain_id = int(deployment.chain_id)
        self.deployment_block = int(deployment.deployment_block)
        self.addresses: dict[str, str] = dict(deployment.contracts)
        self.w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 30}))
        self.rpc_url = rpc_url
        self.contracts = {
            name: self.w3.eth.contract(address=self.addresses[name], abi=abi(name))  # type: ignore[call-overload]
            for name in (*INDEXED_CONTRACTS,)
            if name in self.addresses
        }
        missing = [n for n in INDEXED_CONTRACTS if n not in self.contracts]
        if missing:
            raise DeploymentError(f"deployment JSON {deployment_path} lacks contracts {missing}")
        self._topics: dict[bytes, tuple[str, Any]] = {}
        for name, contract in self.contracts.items():
            for item in contract.abi:
                if item.get("type") == "event":
                    event = contract.events[item["name"]]()
                    topic = Web3.keccak(text=event.signature)
                    self._topics[bytes(topic)] = (name, event)
        self.account = Account.from_key(committer_key) if committer_key is not None else None
        self.domain = Eip712Domain(
            chain_id=self.chain_id,
            verifying_contract=Address(self.addresses["ContributionLedger"]),
        )

    # --- plumbing ---------------------------------------------------------------------------

    def _rpc(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except ContractLogicError as exc:
            raise ContractRevertError(f"{what} reverted: {exc}") from exc
        except (OSError, ConnectionError) as exc:
            raise RpcUnavailableError(
                f"{what}: RPC {self.rpc_url} does not answer ({exc}); is the chain up?"
            ) from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("requests", "urllib3", "aiohttp")):
                raise RpcUnavailableError(
                    f"{what}: RPC {self.rpc_url} does not answer ({exc}); is the chain up?"
                ) from exc
            raise

    def check_chain_id(self) -> None:
        actual = int(self._rpc("eth_chainId", lambda: self.w3.eth.chain_id))
        if actual != self.chain_id:
            raise DeploymentError(
                f"RPC chain id {actual} differs from the deployment's {self.chain_id}: "
                "point COLOCO_LEDGER_RPC_URL at the chain the deployment JSON describes"
            )

    def block_number(self) -> int:
        return int(self._rpc("eth_blockNumber", lambda: self.w3.eth.block_number))

    # --- reads ------------------------------------------------------------------------------

    def logs(self, from_block: int, to_block: int) -> list[ChainEvent]:
        """Decoded events of the indexed contracts in [from_block, to_block], in chain order."""
        raw = self._rpc(
            "eth_getLogs",
            self.w3.eth.get_logs,
            {
                "fromBlock": from_block,
                "toBlock": to_block,
                "address": [c.address for c in self.contracts.values()],
            },
        )
        out: list[ChainEvent] = []
        for entry in raw:
            if not entry["topics"]:
                continue
            known = self._topics.get(bytes(entry["topics"][0]))
            if known is None:
                continue
            name, event = known
            decoded = event.process_log(entry)
            out.append(
                ChainEvent(
                    contract=name,
                    name=decoded["event"],
                    args=dict(decoded["args"]),
                    block_number=int(entry["blockNumber"]),
                    tx_hash="0x" + bytes(entry["transactionHash"]).hex(),
                    log_index=int(entry["logIndex"]),
                )
            )
        out.sort(key=lambda e: (e.block_number, e.log_index))
        return out

    def node_info(self, address: str, block: int | str = "latest") -> NodeRecord:
        fn = self.contracts["StakeManager"].functions.nodes(address)
        operator, payout, staked, unbonding, _ready = self._rpc(
            "StakeManager.nodes", lambda: fn.call(block_identifier=block)
        )
        return NodeRecord(address, str(operator), str(payout), int(staked), int(unbonding))

    def training_config(self, block: int | str = "latest") -> ConfigView:
        tc = self.contracts["TrainingConfig"].functions
        cfg = self._rpc("TrainingConfig.current", lambda: tc.current().call(block_identifier=block))
        version = self._rpc(
            "TrainingConfig.version", lambda: tc.version().call(block_identifier=block)
        )
        return ConfigView(
            version=int(version),
            inner_steps=int(cfg[0]),
            outer_lr_e6=int(cfg[2]),
            min_stake=int(cfg[6]),
            reward_per_round=int(cfg[7]),
            data_mixture=tuple(int(x) for x in cfg[8]),
        )

    def last_round(self, run_id: bytes) -> int | None:
        """The run's last committed round, or None when the run has no genesis commit."""
        fns = self.contracts["ContributionLedger"].functions
        if not self._rpc("hasCommitted", lambda: fns.hasCommitted(run_id).call()):
            return None
        return int(self._rpc("lastRound", lambda: fns.lastRound(run_id).call()))

    def checkpoint_of(self, run_id: bytes, round_: int) -> bytes:
        fns = self.contracts["ContributionLedger"].functions
        return bytes(self._rpc("checkpointOf", lambda: fns.checkpointOf(run_id, round_).call()))

    def latest_rewards_root(self) -> bytes:
        fns = self.contracts["ContributionLedger"].functions
        return bytes(self._rpc("latestRewardsRoot", lambda: fns.latestRewardsRoot().call()))

    # --- committer transactions -------------------------------------------------------------

    def committer_nonce(self, block: Literal["pending", "latest"] = "pending") -> int:
        if self.account is None:
            raise ChainError("no committer key: set COLOCO_LEDGER_COMMITTER_KEYSTORE")
        addr = self.account.address
        return int(self._rpc("nonce", lambda: self.w3.eth.get_transaction_count(addr, block)))

    def sign_commit(
        self,
        *,
        run_id: bytes,
        round_: int,
        rewards_root: bytes,
        checkpoint: bytes,
        total_work: int,
        attestations_root: bytes,
        nonce: int,
    ) -> tuple[str, str]:
        """Sign ``commitRound`` with ``nonce``; return (tx hash, raw tx hex), nothing sent.

        A dry run (gas estimation) comes first, so a revert raises ContractRevertError here.
        """
        if self.account is None:
            raise ChainError("no committer key: set COLOCO_LEDGER_COMMITTER_KEYSTORE")
        fn = self.contracts["ContributionLedger"].functions.commitRound(
            run_id, round_, rewards_root, checkpoint, total_work, attestations_root
        )
        sender = self.account.address
        gas = self._rpc("estimateGas commitRound", lambda: fn.estimate_gas({"from": sender}))
        gas_price = self._rpc("gasPrice", lambda: self.w3.eth.gas_price)
        tx = fn.build_transaction(
            {
                "from": sender,
                "nonce": nonce,
                "gas": int(gas * 1.3) + 20_000,
                "maxFeePerGas": int(gas_price) * 2 + 10**9,
                "maxPriorityFeePerGas": 10**9,
                "chainId": self.chain_id,
            }
        )
        signed = self.account.sign_transaction(tx)
        return "0x" + bytes(signed.hash).hex(), "0x" + bytes(signed.raw_transaction).hex()

    def send_raw(self, raw_tx: str) -> None:
        self._rpc("send commitRound", self.w3.eth.send_raw_transaction, raw_tx)

    def tx_known(self, tx_hash: str) -> bool:
        """Whether the node knows the transaction (pending or mined)."""
        try:
            return self._rpc("tx", self.w3.eth.get_transaction, tx_hash) is not None
        except TransactionNotFound:
            return False

    def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        try:
            rcpt = self._rpc("receipt", self.w3.eth.get_transaction_receipt, tx_hash)
        except TransactionNotFound:
            return None
        return dict(rcpt) if rcpt is not None else None
