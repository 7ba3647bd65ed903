"""`coloco fund open | deposit | status | claim | refund`: fund a run's compute with ETH.

Deposits pay compute contributors in ETH per verified work; backers earn the capital pool's
ownership in proportion to deposit x time funded, vesting linearly after the funding ends.
Every command takes `--json` (`coloco_cli.fund.ops` does the work).
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from coloco_cli.common import (
    DeploymentOpt,
    KeystoreOpt,
    LedgerUrlOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    fmt_units,
    load_signer,
    open_chain,
    parse_amount,
    resolve,
)
from coloco_cli.fund import ops
from protocol.errors import ChainError, ContractRevertError

app = typer.Typer(no_args_is_help=True)
RunArg = Annotated[str, typer.Argument(help="The run id (0x + 64 hex digits).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _emit(obj: dict[str, Any], as_json: bool, text: str) -> None:
    if as_json:
        typer.echo(json.dumps(obj))
    else:
        console.print(text)


def _send(fn: Any) -> Any:
    try:
        return fn()
    except ContractRevertError as exc:
        raise ChainError(ops.explain(exc)) from exc


@app.command("open")
def open_(
    run_id: RunArg,
    *,
    end_in: Annotated[int, typer.Option(help="Seconds from now until deposits close.")] = 3600,
    eth_per_round: Annotated[str, typer.Option(help="Most ETH one round pays compute.")] = "0.1",
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Open a run for deposits (the run organiser, COMMITTER_ROLE).

    Example: coloco fund open 0xRUN --end-in 3600 --eth-per-round 0.1
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    end = int(chain.w3.eth.get_block("latest")["timestamp"]) + end_in
    per_round = parse_amount(eth_per_round, what="--eth-per-round")
    tx = _send(lambda: ops.open_run(chain, run_id, end, per_round))
    _emit({"tx": tx, "funding_end": end, "eth_per_round_wei": str(per_round)}, as_json,
          f"{tx}\nrun open for deposits until {time.ctime(end)}")  # fmt: skip


@app.command()
def deposit(
    run_id: RunArg,
    amount: Annotated[str, typer.Argument(help="ETH to deposit, e.g. 1.5 or 100wei.")],
    *,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Deposit ETH into a run: it pays verified compute; you earn capital-pool ownership.

    Example: coloco fund deposit 0xRUN 2.5
    """
    ep = resolve(rpc_url, None, deployment)
    signer = load_signer(keystore, password_file, private_key)
    chain = open_chain(ep, signer)
    wei = parse_amount(amount)
    tx = _send(lambda: ops.deposit(chain, run_id, wei))
    _emit({"tx": tx, "backer": signer.address, "deposit_wei": str(wei)}, as_json,
          f"{tx}\ndeposited {fmt_units(wei)} ETH from {signer.address}")  # fmt: skip


@app.command()
def status(
    run_id: RunArg,
    *,
    backer: Annotated[str | None, typer.Option(help="Also show this backer.")] = None,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's funding: deposits, ETH paid to compute, capital pool; a backer's vesting.

    Example: coloco fund status 0xRUN --backer 0xBACKER
    """
    st = ops.status(open_chain(resolve(rpc_url, None, deployment)), run_id, backer)
    lines = [f"{k}: {v}" for k, v in st.items() if k != "backer"]
    lines += [f"backer.{k}: {v}" for k, v in (st.get("backer") or {}).items()]
    _emit(st, as_json, "\n".join(lines))


@app.command()
def claim(
    run_id: RunArg,
    *,
    account: Annotated[str, typer.Option(help="Compute payout address or backer to pay.")],
    eth: Annotated[bool, typer.Option(help="Claim ETH earned for compute.")] = True,
    vested: Annotated[bool, typer.Option(help="Claim vested capital ownership.")] = False,
    rpc_url: RpcUrlOpt = None,
    ledger_url: LedgerUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Claim ETH earned for compute (proof from the ledger) and/or vested capital ownership.

    Example: coloco fund claim 0xRUN --account 0xPAYOUT; coloco fund claim 0xRUN --account
    0xBACKER --no-eth --vested
    """
    ep = resolve(rpc_url, ledger_url, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    out: dict[str, Any] = {}
    if eth:
        out["eth"] = _send(lambda: ops.claim_eth(chain, ep.ledger_url, run_id, account))
    if vested:
        out["vested"] = _send(lambda: ops.claim_vested(chain, run_id, account))
    _emit(out, as_json, json.dumps(out, indent=1))


@app.command()
def refund(
    run_id: RunArg,
    *,
    backer: Annotated[str, typer.Option(help="The backer to refund.")],
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Take a backer's pro rata refund of a cancelled run's unspent ETH.

    Example: coloco fund refund 0xRUN --backer 0xBACKER
    """
    ep = resolve(rpc_url, None, deployment)
    chain = open_chain(ep, load_signer(keystore, password_file, private_key))
    out = _send(lambda: ops.refund(chain, run_id, backer))
    _emit(out, as_json, f"{out['tx']}\nrefunded {out['backer']}")
