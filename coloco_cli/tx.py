"""How the CLI sends a transaction: its hash at once, then a progress line until it is confirmed.

`open_chain(..., tx=TxOptions(...))` gives a `ChainClient` whose `transact` prints (on stderr, so
that `--json` output stays one line on stdout) `tx 0x... sent`, then `waiting` lines every few
seconds, then `mined in block N (k/k confirmations)`. `--no-wait` stops after the hash: the
command exits 0 there (a command that sends several transactions stops after the first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from protocol.errors import ChainError

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from protocol.chain import ChainClient
    from protocol.deployment import Deployment

stderr = Console(stderr=True, highlight=False)

GasLimitOpt = Annotated[
    int | None,
    typer.Option(
        "--gas-limit", min=21_000, help="Gas limit (default: the node's estimate + 25%).."
    ),
]
ConfirmationsOpt = Annotated[
    int, typer.Option("--confirmations", min=1, help="Blocks that must hold the transaction.")
]
NoWaitOpt = Annotated[
    bool, typer.Option("--no-wait", help="Print the transaction hash and exit without waiting.")
]
TimeoutOpt = Annotated[
    float, typer.Option("--tx-timeout", min=1.0, help="Seconds to wait for the confirmations.")
]


@dataclass(frozen=True)
class TxOptions:
    gas_limit: int | None = None
    confirmations: int = 1
    no_wait: bool = False
    timeout_s: float = 300.0
    progress_every_s: float = 3.0


def cli_chain(
    rpc_url: str, deployment: Deployment, account: LocalAccount | None, tx: TxOptions
) -> ChainClient:
    """A ChainClient whose transactions report as they go (web3 is imported only here)."""
    cls: Any = _cli_chain_class()
    chain: ChainClient = cls(rpc_url, deployment, account, tx=tx)
    return chain


@cache
def _cli_chain_class() -> type[ChainClient]:
    from protocol.chain import ChainClient

    return type("CliChain", (_Reporting, ChainClient), {})


class _Reporting:
    """Mixed into ChainClient: reports each transaction as it goes (see the module docstring)."""

    send: Any
    rpc: Any
    block_number: Any
    poll_interval_s: float
    _receipt_or_none: Any
    _replay_failure: Any

    def __init__(self, *args: Any, tx: TxOptions, **kwargs: Any) -> None:
        super().__init__(*args, confirmations=tx.confirmations, **kwargs)  # type: ignore[call-arg]
        self.tx = tx

    def transact(
        self,
        contract: str,
        fn: str,
        *args: Any,
        value: int = 0,
        gas: int | None = None,
        confirmations: int | None = None,
    ) -> Any:
        tx_hash = self.send(contract, fn, *args, value=value, gas=gas or self.tx.gas_limit)
        label = f"{contract}.{fn}"
        stderr.print(f"tx 0x{tx_hash.hex()} sent ({label})")
        if self.tx.no_wait:
            stderr.print("not waiting (--no-wait): follow it with your block explorer or cast")
            raise typer.Exit(0)
        needed = confirmations or self.tx.confirmations
        receipt = self._wait_with_progress(tx_hash, needed)
        if receipt["status"] != 1:
            raise self._replay_failure(contract, fn, args, value, receipt)
        stderr.print(
            f"tx 0x{tx_hash.hex()} mined in block {receipt['blockNumber']} "
            f"({needed}/{needed} confirmations, gas used {receipt['gasUsed']})"
        )
        return receipt

    def _wait_with_progress(self, tx_hash: bytes, needed: int) -> Any:
        start = time.monotonic()
        next_line = start + self.tx.progress_every_s
        while True:
            receipt = self.rpc(lambda: self._receipt_or_none(tx_hash), "eth_getTransactionReceipt")
            have = 0 if receipt is None else self.block_number() - receipt["blockNumber"] + 1
            if receipt is not None and have >= needed:
                return receipt
            now = time.monotonic()
            if now - start > self.tx.timeout_s:
                state = "not mined" if receipt is None else f"{have}/{needed} confirmations"
                raise ChainError(
                    f"transaction 0x{tx_hash.hex()} {state} after {self.tx.timeout_s:.0f}s; "
                    "it may still land: look it up by its hash before sending again"
                )
            if now >= next_line:
                state = "pending" if receipt is None else f"{have}/{needed} confirmations"
                stderr.print(f"tx 0x{tx_hash.hex()} {state} ({now - start:.0f}s)")
                next_line = now + self.tx.progress_every_s
            time.sleep(self.poll_interval_s if receipt is None else 0.5)
