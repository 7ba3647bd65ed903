"""The ledger's one door to the chain: a :class:`ChainClient` plus what only the ledger needs.

The client (protocol/chain.py) owns the connection, retries of transient RPC failures, revert
decoding and the typed views (``node_info``, ``training_config``, ``checkpoint_of``, ...); callers
reach those through :attr:`LedgerChain.client`. Kept here: decoded event logs for the indexer,
and the committer's transaction path, where signing and sending are separate steps so crash-safe
settlement can record the transaction hash in between.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from eth_account import Account
from eth_typing import HexStr
from web3 import Web3
from web3.exceptions import BlockNotFound, TransactionNotFound, Web3RPCError
from web3.types import FilterParams, Nonce, TxParams, Wei

from protocol.chain import ChainClient, RetryPolicy
from protocol.deployment import FUNDING_CONTRACT_NAMES, Deployment, abi
from protocol.eip712 import Eip712Domain
from protocol.errors import ChainError, DeploymentError
from protocol.types import RunId

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

log = logging.getLogger(__name__)

INDEXED_CONTRACTS = ("StakeManager", "ContributionLedger", "TrainingConfig")
# indexed too when the deployment has them (ledger/chain/funding_index.py)
FUNDING_CONTRACTS = FUNDING_CONTRACT_NAMES


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
        self,
        rpc_url: str,
        deployment_path: Path | Deployment,
        committer_key: bytes | None,
        *,
        retry: RetryPolicy | None = None,
    ) -> None:
        deployment = (
            deployment_path
            if isinstance(deployment_path, Deployment)
            else Deployment.load(deployment_path)
        )
        missing = [n for n in INDEXED_CONTRACTS if n not in deployment.contracts]
        if missing:
            raise DeploymentError(f"deployment JSON {deployment_path} lacks contracts {missing}")
        account = Account.from_key(committer_key) if committer_key is not None else None
        self.client = ChainClient(rpc_url, deployment, account, retry=retry)
        self.deployment = deployment
        self.chain_id = int(deployment.chain_id)
        self.deployment_block = int(deployment.deployment_block)
        self.domain: Eip712Domain = self.client.attestation_domain()
        self.indexed = INDEXED_CONTRACTS + tuple(
            n for n in FUNDING_CONTRACTS if n in deployment.contracts
        )
        self._topics: dict[tuple[str, bytes], tuple[str, Any]] = {}
        for name in self.indexed:
            contract = self.client.contract(name)
            for item in abi(name):
                if item.get("type") == "event":
                    event = contract.events[item["name"]]()
                    topic = bytes(Web3.keccak(text=event.signature))
                    self._topics[(contract.address.lower(), topic)] = (name, event)

    def check_chain_id(self) -> None:
        """Refuse a chain whose id differs from the deployment's (DeploymentError)."""
        self.client.check_chain()

    def block_number(self) -> int:
        return self.client.block_number()

    def block_hash(self, number: int) -> str | None:
        """The hash of block ``number`` on the node's canonical chain (None: no such block)."""
        eth = self.client.w3.eth
        try:
            block = self.client.rpc(lambda: eth.get_block(number), "eth_getBlockByNumber")
        except BlockNotFound:
            return None
        return "0x" + bytes(block["hash"]).hex() if block and block.get("hash") else None

    def block_time(self, number: int) -> int:
        """The timestamp of block ``number`` (seconds)."""
        eth = self.client.w3.eth
        block = self.client.rpc(lambda: eth.get_block(number), "eth_getBlockByNumber")
        return int(block["timestamp"])

    def last_round(self, run_id: bytes) -> int | None:
        """The run's last committed round, or None when the run has no genesis commit."""
        if not self.client.has_committed(RunId(run_id)):
            return None
        return int(self.client.last_round(RunId(run_id)))

    # --- event logs for the indexer ---------------------------------------------------------

    def logs(self, from_block: int, to_block: int) -> list[ChainEvent]:
        """Decoded events of the indexed contracts in [from_block, to_block], in chain order."""
        query: FilterParams = {
            "fromBlock": from_block,
            "toBlock": to_block,
            "address": [self.client.contract(n).address for n in self.indexed],
        }
        raw = self.client.rpc(lambda: self.client.w3.eth.get_logs(query), "eth_getLogs")
        out: list[ChainEvent] = []
        for entry in raw:
            if not entry["topics"]:
                continue
            known = self._topics.get((str(entry["address"]).lower(), bytes(entry["topics"][0])))
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

    # --- committer transactions: sign, record, then send ------------------------------------

    def _committer(self) -> LocalAccount:
        if self.client.account is None:
            raise ChainError("no committer key: set COLOCO_LEDGER_COMMITTER_KEYSTORE")
        return self.client.account

    def committer_nonce(self, block: Literal["pending", "latest"] = "pending") -> int:
        addr = self._committer().address
        eth = self.client.w3.eth
        return int(self.client.rpc(lambda: eth.get_transaction_count(addr, block), "nonce"))

    def sign_commit(
        self,
        *,
        run_id: bytes,
        round_: int,
        rewards_root: bytes,
        checkpoint: bytes,
        total_work: int,
        attestations_root: bytes,
        reward_total: int = 0,
        nonce: int,
        fees: tuple[int, int] | None = None,
    ) -> tuple[str, str]:
        """Sign ``commitRound`` with ``nonce``; return (tx hash, raw tx hex), nothing sent.

        A dry run (gas estimation) comes first, so a revert raises ContractRevertError here.
        ``fees`` (fee cap, tip) replaces the default fees (a replacement of a stuck commit).
        """
        account = self._committer()
        fn = self.client.contract("ContributionLedger").functions.commitRound(
            run_id, round_, rewards_root, checkpoint, total_work, attestations_root, reward_total
        )
        sender = account.address
        rpc = self.client.rpc
        gas = rpc(lambda: fn.estimate_gas({"from": sender}), "ContributionLedger.commitRound")
        if fees is None:
            gas_price = rpc(lambda: self.client.w3.eth.gas_price, "eth_gasPrice")
            fees = (int(gas_price) * 2 + 10**9, 10**9)
        params: TxParams = {
            "from": sender,
            "nonce": Nonce(nonce),
            "gas": int(gas * 1.3) + 20_000,
            "maxFeePerGas": Wei(fees[0]),
            "maxPriorityFeePerGas": Wei(fees[1]),
            "chainId": self.chain_id,
        }
        tx: dict[str, Any] = dict(rpc(lambda: fn.build_transaction(params), "build commitRound"))
        signed = account.sign_transaction(tx)
        return "0x" + bytes(signed.hash).hex(), "0x" + bytes(signed.raw_transaction).hex()

    def reward_per_round(self) -> int:
        """The governed cap on one commit's reward total: the compute pool per round
        (TrainingConfig.poolRewards()[0], rewardPerRound times the compute share)."""
        return int(self.client.training_config.pool_rewards()[0])

    def send_raw(self, raw_tx: str) -> None:
        eth = self.client.w3.eth
        try:
            self.client.rpc(lambda: eth.send_raw_transaction(HexStr(raw_tx)), "send commitRound")
        except Web3RPCError as exc:
            text = str(exc).lower()
            if "already known" in text:
                log.debug("commitRound already in the node's pool (a retried send)")
                return
            if "nonce too low" in text and self.tx_known(self._hash_of(raw_tx)):
                log.warning("commitRound: %s, but the transaction is known: it landed", exc)
                return
            raise

    @staticmethod
    def _hash_of(raw_tx: str) -> str:
        return "0x" + bytes(Web3.keccak(hexstr=HexStr(raw_tx))).hex()

    def replacement_fees(self, tx_hash: str, bump: float = 1.125) -> tuple[int, int]:
        """(fee cap, tip) for a replacement of pending ``tx_hash``: both raised by ``bump``
        (nodes want >= 10%), the cap at least twice the latest base fee plus the tip."""
        eth = self.client.w3.eth
        try:
            tx: Any = self.client.rpc(lambda: eth.get_transaction(HexStr(tx_hash)), "tx")
        except TransactionNotFound:
            tx = {}  # gone from the pool: no replacement rule, fees from the base fee alone
        block = self.client.rpc(lambda: eth.get_block("latest"), "eth_getBlockByNumber")
        old_cap = int(tx.get("maxFeePerGas", tx.get("gasPrice", 0)))
        old_tip = int(tx.get("maxPriorityFeePerGas", tx.get("gasPrice", 0)))
        tip = max(int(old_tip * bump) + 1, 10**9)
        cap = max(int(old_cap * bump) + 1, 2 * int(block.get("baseFeePerGas", 0)) + tip)
        return cap, tip

    def tx_known(self, tx_hash: str) -> bool:
        """Whether the node knows the transaction (pending or mined)."""
        eth = self.client.w3.eth
        try:
            return self.client.rpc(lambda: eth.get_transaction(HexStr(tx_hash)), "tx") is not None
        except TransactionNotFound:
            return False

    def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        eth = self.client.w3.eth
        try:
            rcpt = self.client.rpc(lambda: eth.get_transaction_receipt(HexStr(tx_hash)), "receipt")
        except TransactionNotFound:
            return None
        return dict(rcpt) if rcpt is not None else None
