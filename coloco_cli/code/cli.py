"""`coloco code submit | list | show | approve | reject | claim`: paid code contributions.

Anyone submits; the review committee (appointed by governance) approves an amount from the run's
code pool or rejects with a reason; large amounts go to a governance vote (`approveByVote`).
Every command takes `--json` (`coloco_cli.code.ops` does the work).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from coloco_cli.code import ops
from coloco_cli.common import (
    DeploymentOpt,
    KeystoreOpt,
    PasswordFileOpt,
    PrivateKeyOpt,
    RpcUrlOpt,
    console,
    load_signer,
    open_chain,
    parse_amount,
    resolve,
    revert_hint,
)
from protocol.errors import ChainError, ContractRevertError

app = typer.Typer(no_args_is_help=True)
IdArg = Annotated[int, typer.Argument(help="The contribution id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _emit(obj: Any, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(obj))
    elif isinstance(obj, list):
        for item in obj:
            console.print(
                f"#{item['id']} {item['status']} {item['amount']} {item.get('repository_uri', '')}"
            )
    else:
        console.print("\n".join(f"{k}: {v}" for k, v in obj.items()))


def _sender(
    rpc_url: str | None, deployment: Any, keystore: Any, password_file: Any, private_key: str | None
) -> Any:
    return open_chain(
        resolve(rpc_url, None, deployment), load_signer(keystore, password_file, private_key)
    )


def _send(fn: Any) -> Any:
    try:
        return fn()
    except ContractRevertError as exc:
        raise ChainError(revert_hint(exc, ops.HINTS)) from exc


@app.command()
def submit(
    run_id: Annotated[str, typer.Argument(help="The run id (0x + 64 hex digits).")],
    *,
    repo: Annotated[str, typer.Option(help="Repository URI.")],
    commit: Annotated[str, typer.Option(help="Commit hash (git SHA-1 or SHA-256, hex).")],
    description: Annotated[str, typer.Option(help="URI of a description (PR, issue, doc).")],
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a code contribution to a run for review.

    Example: coloco code submit 0xRUN --repo https://github.com/o/r.git --commit 9fceb02d...
    --description https://github.com/o/r/pull/7
    """
    chain = _sender(rpc_url, deployment, keystore, password_file, private_key)
    _emit(_send(lambda: ops.submit(chain, run_id, repo, commit, description)), as_json)


@app.command("list")
def list_(
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    *,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List submitted contributions with their status (and reasons of rejections)."""
    _emit(ops.list_all(open_chain(resolve(rpc_url, None, deployment)), run_id), as_json)


@app.command()
def show(
    cid: IdArg,
    *,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one contribution: run, contributor, status, approved amount."""
    _emit(ops.show(open_chain(resolve(rpc_url, None, deployment)), cid), as_json)


@app.command()
def approve(
    cid: IdArg,
    amount: Annotated[str, typer.Argument(help="Tokens to approve, e.g. 5 (CMS).")],
    *,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve a contribution for an amount of the code pool (a committee member).

    Example: coloco code approve 1 5
    """
    chain = _sender(rpc_url, deployment, keystore, password_file, private_key)
    units = parse_amount(amount, what="amount")
    _emit(_send(lambda: ops.approve(chain, cid, units)), as_json)


@app.command()
def reject(
    cid: IdArg,
    *,
    reason: Annotated[str, typer.Option(help="Why (recorded in the event).")],
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject a contribution with a reason (a committee member)."""
    chain = _sender(rpc_url, deployment, keystore, password_file, private_key)
    _emit(_send(lambda: ops.reject(chain, cid, reason)), as_json)


@app.command()
def claim(
    cid: IdArg,
    *,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
    keystore: KeystoreOpt = None,
    password_file: PasswordFileOpt = None,
    private_key: PrivateKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pay an approved contribution's tokens to its contributor (anyone may send it)."""
    chain = _sender(rpc_url, deployment, keystore, password_file, private_key)
    _emit(_send(lambda: ops.claim(chain, cid)), as_json)
