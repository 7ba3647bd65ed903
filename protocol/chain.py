"""`ChainClient`: the one object through which Python talks to coloco's contracts.

Over web3.py with the deployment JSON and forge's ABIs. It keeps its own nonce counter (resynced
from the chain when a node says the nonce is wrong), estimates gas with a margin, retries
transient RPC failures (connection refused, timeouts, HTTP 429/5xx) with exponential backoff,
waits for a configurable number of confirmations, and turns reverts into
:class:`ContractRevertError` with the custom error's name and decoded arguments.
Typed read/write helpers for the other parts live in :mod:`protocol.chain_views`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import requests
from hexbytes import HexBytes
from web3 import HTTPProvider, Web3
from web3.exceptions import ContractLogicError, ProviderConnectionError, Web3RPCError

from protocol.chain_views import ChainViews
from protocol.deployment import Deployment, abi, available_abis
from protocol.errors import ChainError, DeploymentError, RpcUnavailableError
from protocol.reverts import ErrorDecoder

if TYPE_CHECKING:
    from eth_account.datastructures import SignedTransaction
    from eth_account.signers.local import LocalAccount
    from web3.contract import Contract
    from web3.types import TxReceipt

log = logging.getLogger(__name__)
T = TypeVar("T")

_NONCE_ERRORS = ("nonce too low", "nonce too high", "replacement transaction underpriced")


@dataclass(frozen=True)
class RetryPolicy:
    """How transient RPC failures are retried: ``attempts`` tries, delays doubling up to a cap."""

    attempts: int = 5
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay_s, self.base_delay_s * 2**attempt))


@dataclass(frozen=True)
class _Sent:
    """What :meth:`ChainClient.bump` needs to re-sign a sent transaction with higher fees."""

    func: Any
    params: dict[str, Any]
    label: str
    tx: dict[str, Any]

    def signed_fees(self) -> tuple[int, int]:
        """(fee cap, tip) the transaction was signed with (a legacy price counts as both)."""
        if "maxFeePerGas" in self.tx:
            return int(self.tx["maxFeePerGas"]), int(self.tx["maxPriorityFeePerGas"])
        price = int(self.tx.get("gasPrice", 0))
        return price, price


def _revert_data(exc: ContractLogicError) -> str | None:
    return exc.data if isinstance(exc.data, str) else None


def _http_session(url: str) -> requests.Session:
    """One HTTP session for every thread, its environment read once: proxies (HTTP(S)_PROXY,
    NO_PROXY) and CA bundle (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE) as requests would read them,
    but here, not at every request (requests' per-request look-up of urllib's proxy settings
    walked os.environ: a third of an RPC round trip's CPU in the ledger's tick)."""
    session = requests.Session()
    session.trust_env = False
    session.proxies.update(requests.utils.get_environ_proxies(url))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    return session


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, requests.HTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        return status == 429 or status >= 500
    return isinstance(exc, requests.ConnectionError | requests.Timeout | ProviderConnectionError)


GAS_HEADROOM = 30_000
"""Gas added to every estimate (after ``gas_margin``): a transaction mined in a later second than
the block its estimate ran on can write a storage slot the estimate did not (ERC20Votes with a
timestamp clock pushes a new checkpoint instead of updating the second's one: +20,000), which a
relative margin does not cover on a small transaction. Only gas used is paid."""


class ChainClient(ChainViews):
    """Calls and transactions against one deployment (see module docstring)."""

    def __init__(
        self,
        rpc_url: str,
        deployment: Deployment,
        account: LocalAccount | None = None,
        *,
        confirmations: int = 1,
        retry: RetryPolicy | None = None,
        gas_margin: float = 1.25,
        request_timeout_s: float = 30.0,
        receipt_timeout_s: float = 120.0,
        poll_interval_s: float = 0.05,
        bump_after_s: float = 30.0,
        fee_bump: float = 1.125,
        max_fee_per_gas: int | None = None,
    ) -> None:
        if confirmations < 1:
            raise ChainError("confirmations counts the block holding the transaction: use >= 1")
        self.rpc_url = rpc_url
        self.deployment = deployment
        self.account = account
        self.confirmations = confirmations
        self.retry = retry or RetryPolicy()
        self.gas_margin = gas_margin
        self.receipt_timeout_s = receipt_timeout_s
        self.poll_interval_s = poll_interval_s
        self.bump_after_s = bump_after_s
        self.fee_bump = fee_bump
        self.max_fee_per_gas = max_fee_per_gas
        self._sent: dict[bytes, _Sent] = {}
        self._built: dict[bytes, dict[str, Any]] = {}
        provider = HTTPProvider(
            rpc_url,
            request_kwargs={"timeout": request_timeout_s},
            session=_http_session(rpc_url),
            exception_retry_configuration=None,  # retries are ours, for every method
        )
        self.w3 = Web3(provider)
        self._contracts: dict[str, Contract] = {}
        self._decoder: ErrorDecoder | None = None
        self._lock = threading.RLock()
        self._nonce: int | None = None
        self._chain_checked = False

    def __repr__(self) -> str:
        return (
            f"ChainClient({self.rpc_url!r}, chain_id={self.deployment.chain_id}, "
            f"account={self.account_address})"
        )

    @property
    def account_address(self) -> str | None:
        return None if self.account is None else str(self.account.address)

    # --- plumbing -----------------------------------------------------------------------------

    def contract(self, name: str) -> Contract:
        """The web3 contract object for ``name`` (address from the deployment, ABI from out/)."""
        if name not in self._contracts:
            self._contracts[name] = self.w3.eth.contract(
                address=Web3.to_checksum_address(self.deployment.address(name)), abi=abi(name)
            )
        return self._contracts[name]

    def errors(self) -> ErrorDecoder:
        """Decoder over the custom errors of every contract of the deployment with an artifact."""
        if self._decoder is None:
            self._decoder = ErrorDecoder(available_abis(self.deployment.contracts))
        return self._decoder

    def rpc(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` (one RPC round trip), retrying transient failures; revert -> decoded."""
        for attempt in range(self.retry.attempts):
            try:
                return fn()
            except ContractLogicError as exc:
                raise self.errors().decode(_revert_data(exc), context=what) from None
            except Exception as exc:
                if not _is_transient(exc):
                    raise
                if attempt == self.retry.attempts - 1:
                    raise RpcUnavailableError(
                        f"RPC {self.rpc_url} did not answer {what} after {self.retry.attempts} "
                        f"attempts ({type(exc).__name__}: {exc}); check that the node is running "
                        f"and --rpc-url / COLOCO_RPC_URL points at it"
                    ) from exc
                delay = self.retry.delay(attempt)
                log.warning("RPC %s failed (%s); retry in %.2fs", what, type(exc).__name__, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def check_chain(self) -> None:
        """Refuse to send to a chain whose id differs from the deployment's."""
        if self._chain_checked:
            return
        actual = self.rpc(lambda: self.w3.eth.chain_id, "eth_chainId")
        if actual != self.deployment.chain_id:
            raise DeploymentError(
                f"RPC {self.rpc_url} is chain {actual} but the deployment is for chain "
                f"{self.deployment.chain_id}: use the matching --rpc-url or deployment JSON"
            )
        self._chain_checked = True

    def block_number(self) -> int:
        return int(self.rpc(lambda: self.w3.eth.block_number, "eth_blockNumber"))

    # --- calls and transactions ---------------------------------------------------------------

    def call(self, contract: str, fn: str, *args: Any, block: int | str = "latest") -> Any:
        """A view call; a revert becomes ContractRevertError."""
        func = self.contract(contract).get_function_by_name(fn)(*args)
        return self.rpc(lambda: func.call(block_identifier=block), f"{contract}.{fn}")

    def send(
        self, contract: str, fn: str, *args: Any, value: int = 0, gas: int | None = None
    ) -> bytes:
        """Sign and send a transaction; return its hash without waiting for it.

        Never sends the same intent twice: after an ambiguous failure (a timeout, "nonce too
        low", "already known") the transaction is looked up by its hash before anything is
        re-signed, so a send that timed out but landed is taken as sent.
        """
        if self.account is None:
            raise ChainError(
                f"{contract}.{fn} sends a transaction: create the client with an account"
            )
        account = self.account
        self.check_chain()
        label = f"{contract}.{fn}"
        func = self.contract(contract).get_function_by_name(fn)(*args)
        params: dict[str, Any] = {"from": account.address, "value": value}
        with self._lock:
            for _ in range(3):
                if self._nonce is None:
                    self._nonce = self.rpc(
                        lambda: self.w3.eth.get_transaction_count(account.address, "pending"),
                        "eth_getTransactionCount",
                    )
                nonce = self._nonce
                limit = (
                    gas
                    or int(self.rpc(lambda: func.estimate_gas(params), label) * self.gas_margin)
                    + GAS_HEADROOM
                )
                tx_params = {**params, "nonce": nonce, "gas": limit}
                signed = self._sign(account, func, tx_params, label)
                built = self._built.pop(bytes(signed.hash))
                if not self._push(signed, nonce, label):
                    self._nonce = None  # the nonce went to another transaction: resync
                    continue
                self._nonce = nonce + 1
                self._sent[bytes(signed.hash)] = _Sent(func, tx_params, label, built)
                log.debug(
                    "%s sent: nonce %d, gas %d, hash %s", label, nonce, limit, signed.hash.hex()
                )
                return bytes(signed.hash)
        raise ChainError(
            f"{label}: nonce kept changing under us; is another process using this key?"
        )

    def _push(self, signed: SignedTransaction, nonce: int, label: str) -> bool:
        """Send ``signed``; True once the node holds it, False when its nonce went elsewhere."""
        tx_hash = bytes(signed.hash)
        try:
            self.rpc(partial(self.w3.eth.send_raw_transaction, signed.raw_transaction), label)
            return True
        except RpcUnavailableError as exc:
            try:
                known = self.transaction_known(tx_hash)
            except RpcUnavailableError:
                known = False
            if known:
                log.warning("%s: the send failed (%s) but 0x%s landed", label, exc, tx_hash.hex())
                return True
            self._nonce = None
            raise ChainError(
                f"{label}: the node did not answer the send of 0x{tx_hash.hex()} (nonce {nonce}) "
                f"and cannot say whether it holds it: {exc}. Look the hash up before sending "
                "the same intent again"
            ) from exc
        except Web3RPCError as exc:
            text = str(exc).lower()
            if "already known" in text or "already imported" in text:
                return True  # our own resend after a lost answer
            if not any(marker in text for marker in _NONCE_ERRORS):
                raise ChainError(f"{label}: the node refused the transaction: {exc}") from exc
            if self.transaction_known(tx_hash):
                log.warning(
                    "%s: %s, but 0x%s is known: an earlier try landed", label, exc, tx_hash.hex()
                )
                return True
            log.warning("%s: nonce %d refused (%s); resyncing", label, nonce, exc)
            return False

    def transaction_known(self, tx_hash: bytes) -> bool:
        """Whether the node holds the transaction (in its pool or mined), by hash."""
        from web3.exceptions import TransactionNotFound

        def lookup() -> bool:
            try:
                return self.w3.eth.get_transaction(HexBytes(tx_hash)) is not None
            except TransactionNotFound:
                return False

        return self.rpc(lookup, "eth_getTransactionByHash")

    def _sign(
        self, account: LocalAccount, func: Any, tx_params: dict[str, Any], label: str
    ) -> SignedTransaction:
        tx = self.rpc(partial(func.build_transaction, tx_params), label)
        signed = account.sign_transaction(tx)
        self._built[bytes(signed.hash)] = dict(tx)
        return signed

    def bump(self, tx_hash: bytes) -> bytes:
        """Replace a pending transaction sent by :meth:`send`: same nonce, fees raised.

        Both fees rise by at least :attr:`fee_bump` (nodes want >= 10% to replace) and the fee
        cap covers twice the latest base fee; returns the new hash (the old one may still win).
        """
        sent = self._sent.get(tx_hash)
        if sent is None or self.account is None:
            raise ChainError(f"0x{tx_hash.hex()} was not sent by this client: cannot replace it")
        old = sent.signed_fees()
        base = int(
            self.rpc(lambda: self.w3.eth.get_block("latest"), "eth_getBlockByNumber").get(
                "baseFeePerGas", 0
            )
        )
        tip = max(int(old[1] * self.fee_bump) + 1, 10**9)
        cap = max(int(old[0] * self.fee_bump) + 1, 2 * base + tip)
        if self.max_fee_per_gas is not None and cap > self.max_fee_per_gas:
            raise ChainError(
                f"{sent.label}: replacing 0x{tx_hash.hex()} needs a fee cap of {cap} wei, over "
                f"the configured maximum {self.max_fee_per_gas}; raise it or wait"
            )
        params = {**sent.params, "maxFeePerGas": cap, "maxPriorityFeePerGas": tip}
        params.pop("gasPrice", None)
        with self._lock:
            signed = self._sign(self.account, sent.func, params, sent.label)
            built = self._built.pop(bytes(signed.hash))
            try:
                pushed = self._push(signed, int(params["nonce"]), sent.label)
            except ChainError as exc:
                if "base fee" not in str(exc).lower():
                    raise
                # the base fee rose past the cap between our read and the send: the next bump
                # reads it again (the old transaction stays; nothing was replaced)
                log.warning("%s: replacement of 0x%s refused (%s); retrying at the next bump",
                            sent.label, tx_hash.hex(), exc)  # fmt: skip
                return tx_hash
            if not pushed:
                log.info("%s: nonce %d already used; no replacement", sent.label, params["nonce"])
                return tx_hash
        new = bytes(signed.hash)
        self._sent[new] = _Sent(sent.func, params, sent.label, built)
        log.warning(
            "%s: 0x%s stuck; replaced by 0x%s (fee cap %d, tip %d)",
            sent.label, tx_hash.hex(), new.hex(), cap, tip,
        )  # fmt: skip
        return new

    def wait_for_receipt(
        self, tx_hash: bytes, *, confirmations: int | None = None, timeout_s: float | None = None
    ) -> TxReceipt:
        """Wait until the transaction is mined and ``confirmations`` blocks hold it (1 = mined).

        A transaction of this client not mined after :attr:`bump_after_s` is replaced with
        higher fees (:meth:`bump`); whichever of the versions is mined is the answer.
        """
        needed = self.confirmations if confirmations is None else confirmations
        deadline = time.monotonic() + (timeout_s or self.receipt_timeout_s)
        hashes = [tx_hash]
        bump_at = time.monotonic() + self.bump_after_s
        while True:
            receipt = None
            for candidate in hashes:
                receipt = self.rpc(
                    partial(self._receipt_or_none, candidate), "eth_getTransactionReceipt"
                )
                if receipt is not None:
                    break
            if receipt is not None and self.block_number() - receipt["blockNumber"] + 1 >= needed:
                for done in hashes:
                    self._sent.pop(done, None)
                return receipt
            if time.monotonic() > deadline:
                state = (
                    "not mined" if receipt is None else f"mined but short of {needed} confirmations"
                )
                raise ChainError(
                    f"transaction 0x{tx_hash.hex()} {state} after "
                    f"{timeout_s or self.receipt_timeout_s:.0f}s; check the node and gas price"
                )
            if receipt is None and hashes[-1] in self._sent and time.monotonic() > bump_at:
                replacement = self.bump(hashes[-1])
                if replacement not in hashes:
                    hashes.append(replacement)
                bump_at = time.monotonic() + self.bump_after_s
            time.sleep(self.poll_interval_s)

    def _receipt_or_none(self, tx_hash: bytes) -> TxReceipt | None:
        from web3.exceptions import TransactionNotFound

        try:
            return self.w3.eth.get_transaction_receipt(HexBytes(tx_hash))
        except TransactionNotFound:
            return None

    def transact(
        self,
        contract: str,
        fn: str,
        *args: Any,
        value: int = 0,
        gas: int | None = None,
        confirmations: int | None = None,
    ) -> TxReceipt:
        """Send, wait for the receipt; a revert (estimated or mined) becomes ContractRevertError."""
        tx_hash = self.send(contract, fn, *args, value=value, gas=gas)
        receipt = self.wait_for_receipt(tx_hash, confirmations=confirmations)
        if receipt["status"] != 1:
            raise self._replay_failure(contract, fn, args, value, receipt)
        return receipt

    def _replay_failure(
        self, contract: str, fn: str, args: tuple[Any, ...], value: int, receipt: TxReceipt
    ) -> ChainError:
        """Re-run a mined, failed transaction as a call at its block to recover the reason."""
        label = f"{contract}.{fn}"
        func = self.contract(contract).get_function_by_name(fn)(*args)
        try:
            func.call({"from": self.account_address, "value": value}, receipt["blockNumber"] - 1)
        except ContractLogicError as exc:
            return self.errors().decode(_revert_data(exc), context=label)
        except Exception as exc:  # the replay itself failed: report the mined failure plainly
            log.debug("replay of %s failed: %s", label, exc)
        return ChainError(
            f"{label} was mined in block {receipt['blockNumber']} but failed (status 0), "
            f"gas used {receipt['gasUsed']}: out of gas or a reason the replay could not show"
        )
