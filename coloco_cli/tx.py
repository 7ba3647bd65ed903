"""How the CLI sends a transaction: one option set, one send-and-report path for every group.

`@sends` gives a command the options of a sender (`--rpc-url`, `--ledger-url`, `--deployment`,
`--account` / `--keystore` / `--password-file` / `--private-key`, `--gas-limit`,
`--confirmations`, `--no-wait`, `--json`) as one `TxOptions` argument `opts`; `@reads` gives a
read-only command the first three and `--json`. `send_and_report(opts, fn)` opens the chain as
the sender, runs `fn(chain)` and prints what it returns: one JSON object with `--json`, else a
line of text.

The chain client it opens reports each transaction as it goes, on stderr (so that `--json`
output stays one line on stdout): `tx 0x... sent` at once, then `pending` lines every few seconds,
then `mined in block N (k/k confirmations)`. `--no-wait` stops after the hash: the command exits 0
there (with `--json`, printing `{"tx": ..., "waited": false}`); a command that sends several
transactions stops after the first.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from coloco_cli.common import (
    AccountOpt,
    DeploymentOpt,
    Endpoints,
    JsonOpt,
    KeystoreOpt,
    LedgerUrlOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    emit_json,
    explained_revert,
    load_signer,
    resolve,
)
from protocol.errors import ChainError

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from protocol.chain import ChainClient
    from protocol.chain_reader import ChainReader
    from protocol.deployment import Deployment

stderr = Console(stderr=True, highlight=False)

GasLimitOpt = Annotated[
    int | None,
    typer.Option("--gas-limit", min=21_000, help="Gas limit (default: the node's estimate + 25%)."),
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
    """Where to send (chain, ledger, deployment), who signs, how to send, how to report."""

    rpc_url: str | None = None
    ledger_url: str | None = None
    deployment: Path | None = None
    keystore: Path | None = None
    password_file: Path | None = None
    private_key: str | None = None
    account: str | None = None
    gas_limit: int | None = None
    confirmations: int = 1
    no_wait: bool = False
    json_out: bool = False
    timeout_s: float = 300.0
    progress_every_s: float = 3.0

    def endpoints(self) -> Endpoints:
        return resolve(self.rpc_url, self.ledger_url, self.deployment)

    def signer(self) -> LocalAccount:
        """The sender's key (named account, keystore or raw devnet key); ConfigError if none."""
        return load_signer(self.keystore, self.password_file, self.private_key, self.account)

    def chain(self, *, signed: bool = True) -> ChainClient:
        """A chain client sending as the signer (`signed=False`: a read-only one)."""
        return open_chain(self.endpoints(), self.signer() if signed else None, self)

    def reader(self) -> ChainReader:
        """Read-only views over plain JSON-RPC (no web3 import: a quick start-up for commands
        that only read contract views; events and sends take `chain()`)."""
        from protocol.chain_reader import ChainReader

        ep = self.endpoints()
        return ChainReader(ep.rpc_url, ep.deployment())


_READ_OPTIONS: dict[str, tuple[Any, Any]] = {
    "rpc_url": (RpcUrlOpt, None),
    "ledger_url": (LedgerUrlOpt, None),
    "deployment": (DeploymentOpt, None),
    "json_out": (JsonOpt, False),
}
_SEND_OPTIONS: dict[str, tuple[Any, Any]] = {
    **_READ_OPTIONS,
    "account": (AccountOpt, None),
    "keystore": (KeystoreOpt, None),
    "password_file": (PasswordFileOpt, None),
    "private_key": (PrivateKeyOpt, None),
    "gas_limit": (GasLimitOpt, None),
    "confirmations": (ConfirmationsOpt, 1),
    "no_wait": (NoWaitOpt, False),
}


def _with_options(options: dict[str, tuple[Any, Any]]) -> Callable[[Callable[..., Any]], Any]:
    """A decorator: the command's own parameters but `opts`, then `options` as keyword options;
    typer reads the new signature, and the command receives the options as `opts: TxOptions`."""

    def decorate(fn: Callable[..., Any]) -> Any:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "opts"]
        extra = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
            for name, (a, d) in options.items()
        ]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            fields = {name: kwargs.pop(name) for name in options}
            return fn(*args, opts=TxOptions(**fields), **kwargs)

        params = [*own, *extra]
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


sends = _with_options(_SEND_OPTIONS)
"""A command that sends transactions: it receives the sender's options as `opts: TxOptions`."""
reads = _with_options(_READ_OPTIONS)
"""A read-only command: it receives `--rpc-url`, `--ledger-url`, `--deployment`, `--json`."""
signs = _with_options(
    {name: _SEND_OPTIONS[name] for name in (*_READ_OPTIONS, "account", "keystore",
                                           "password_file", "private_key")}
)  # fmt: skip
"""A command that signs a message for the ledger (no transaction): the read options and the
signer's (`--account`, `--keystore`, `--password-file`, `--private-key`)."""


def report(opts: TxOptions, out: Mapping[str, Any], text: str | Callable[[Any], str]) -> None:
    """What a command prints: `out` as one JSON line with --json, else `text` (or text(out))."""
    if opts.json_out:
        emit_json(dict(out))
    else:
        console.print(text(out) if callable(text) else text)


def send_and_report(
    opts: TxOptions,
    fn: Callable[[ChainClient], Mapping[str, Any]],
    text: str | Callable[[Any], str] | None = None,
    *,
    hints: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Send as the sender of `opts`: `fn(chain)` sends (each transaction's hash printed at once,
    then its receipt's block and gas) and returns what to report; a revert's custom error gets
    its hint from `hints`. Prints one JSON object with --json, else `text` (default: one
    `key: value` line a field)."""
    chain = opts.chain()
    with explained_revert(hints or {}):
        out = dict(fn(chain))
    report(opts, out, text if text is not None else _lines)
    return out


def _lines(out: Mapping[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in out.items())


def tx_hex(receipt: Any) -> str:
    """The 0x transaction hash of a web3 receipt."""
    return "0x" + bytes(receipt["transactionHash"]).hex()


def open_chain(
    ep: Endpoints, account: LocalAccount | None = None, tx: TxOptions | None = None
) -> ChainClient:
    """A chain client for the deployment, optionally able to send transactions as `account`.

    Its transactions print their hash at once, then progress until confirmed (module docstring).
    """
    return cli_chain(ep.rpc_url, ep.deployment(), account, tx or TxOptions())


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
            if self.tx.json_out:
                emit_json({"tx": f"0x{tx_hash.hex()}", "call": label, "waited": False})
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
