"""`coloco devnet up | down | deploy | status`: a local anvil chain for trying coloco out.

State lives under `.coloco/devnet/` in the current directory (coloco_cli/devnet/state.py):
`anvil.pid`, `anvil.log`, `anvil-accounts.json` (anvil's funded dev keys), `devnet.json` (RPC
URL, port, chain id) and, after `deploy`, `deployment.json`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coloco_cli.common import JsonOpt, RpcUrlOpt, console, emit_json
from coloco_cli.devnet.state import (
    ACCOUNTS_FILE,
    DEVNET_DEPLOYMENT,
    DEVNET_DIR,
    PID_FILE,
    STATE_FILE,
    devnet_rpc_url,
    running_pid,
)
from coloco_cli.procs import port_open
from protocol.errors import ChainError, ConfigError, DeploymentError

if TYPE_CHECKING:
    from protocol.deploy import OwnershipSplit

log = logging.getLogger(__name__)

app = typer.Typer(no_args_is_help=True)

# the devnet's genesis ownership split: nodes, backers and code contributors each earn
DEFAULT_SPLIT = "compute=7000,capital=2000,code=1000"


def devnet_accounts(workdir: Path = DEVNET_DIR) -> list[tuple[str, str]]:
    """anvil's funded (address, private key) pairs for the devnet in `workdir`."""
    path = workdir / "anvil-accounts.json"
    if not path.is_file():
        raise ConfigError(f"no devnet accounts at {path}: start the devnet with `coloco devnet up`")
    cfg = json.loads(path.read_text())
    return list(zip(cfg["available_accounts"], cfg["private_keys"], strict=True))


@app.command()
def up(
    *,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8545,
    chain_id: Annotated[int, typer.Option(help="Chain id.")] = 31337,
    block_time: Annotated[
        float | None, typer.Option(help="Seconds per block (default: mine on each transaction).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Start anvil on 127.0.0.1 in the background (pid file and log under .coloco/devnet/).

    Example: coloco devnet up --port 8545 && coloco devnet deploy
    """
    from protocol.devnet import AnvilProcess

    pid = running_pid()
    if pid is not None:
        raise ConfigError(
            f"the devnet is already up (anvil pid {pid}); stop it first with `coloco devnet down`"
        )
    if port_open("127.0.0.1", port):
        raise ConfigError(
            f"port {port} on 127.0.0.1 is in use by another program: pick another with --port"
        )
    anvil = AnvilProcess.start(
        DEVNET_DIR, port=port, chain_id=chain_id, block_time=block_time, detach=True
    )
    STATE_FILE.write_text(
        json.dumps({"rpc_url": anvil.rpc_url, "port": port, "chain_id": chain_id, "pid": anvil.pid})
    )
    if json_out:
        emit_json({"rpc_url": anvil.rpc_url, "chain_id": chain_id, "pid": anvil.pid,
                   "accounts": str(ACCOUNTS_FILE)})  # fmt: skip
        return
    console.print(
        f"devnet up: anvil pid {anvil.pid}, RPC [bold]{anvil.rpc_url}[/], chain {chain_id}"
    )
    console.print(f"funded dev accounts: {ACCOUNTS_FILE} (deployer = first one)")
    console.print("next: [bold]coloco devnet deploy[/]")


@app.command()
def down(
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the port to be freed.")
    ] = 10.0,
    json_out: JsonOpt = False,
) -> None:
    """Stop the devnet's anvil (by its pid file) and wait until its port is free.

    Example: coloco devnet down
    """
    from protocol.devnet import stop_pid

    pid = running_pid()
    if pid is None:
        if json_out:
            emit_json({"stopped": None})
            return
        console.print("devnet is not running (no live anvil pid in .coloco/devnet/)")
        return
    port = json.loads(STATE_FILE.read_text())["port"] if STATE_FILE.is_file() else None
    stop_pid(pid, timeout=timeout)
    deadline = time.monotonic() + timeout
    while port is not None and port_open("127.0.0.1", int(port)):
        if time.monotonic() > deadline:
            raise ChainError(f"anvil pid {pid} stopped but port {port} is still in use")
        time.sleep(0.05)
    PID_FILE.unlink(missing_ok=True)
    STATE_FILE.unlink(missing_ok=True)
    if json_out:
        emit_json({"stopped": pid, "port": port})
        return
    console.print(f"devnet down: anvil pid {pid} stopped, port {port} free")


@app.command()
def deploy(
    *,
    rpc_url: RpcUrlOpt = None,
    deployer_key: Annotated[
        str | None,
        typer.Option(
            envvar="COLOCO_DEPLOYER_KEY", help="Deployer private key (default: devnet account 0)."
        ),
    ] = None,
    committer: Annotated[
        str | None,
        typer.Option(
            help="Address allowed to commit rounds (the ledger's key; default account 1)."
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Where to write the deployment JSON.")
    ] = DEVNET_DEPLOYMENT,
    voting_period: Annotated[
        int,
        typer.Option(
            help="Voting period in seconds (timestamp clock, running with the wall clock between "
            "blocks: too short and it ends before the vote lands; at most the unbonding delay "
            "(60 s on a devnet) minus 12)."
        ),
    ] = 45,
    timelock_delay: Annotated[int, typer.Option(help="Timelock delay in seconds.")] = 1,
    inner_steps: Annotated[
        int | None, typer.Option(min=1, help="Initial inner steps per round (H).")
    ] = None,
    ownership_split: Annotated[
        str,
        typer.Option(
            metavar="compute=BPS,capital=BPS,code=BPS",
            help="Each round's reward split between compute (nodes), capital (backers) and "
            "code (the code pool), in basis points summing to 10000. With capital=0 backers "
            "earn no ownership; with code=0 no contribution can be paid.",
        ),
    ] = DEFAULT_SPLIT,
    code_committee: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ADDRESS|NAME",
            help="A member of the code review committee (repeatable): an address or a named "
            "account (`coloco keys`); 'none' for no committee. Default: the deployer (devnet "
            "account 0: `coloco devnet key 0`). A member never approves its own submission.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Deploy and wire every coloco contract, then write the deployment JSON.

    Devnet defaults let every kind of contributor earn: the ownership split gives compute
    7000, capital 2000 and code 1000 basis points, and the deployer (account 0) sits on the
    code committee; the ledger's committer, who opens runs for funding, is account 1.

    Example: coloco devnet deploy --ownership-split compute=8000,capital=1000,code=1000
    """
    from protocol.deploy import deploy as run_deploy

    split = parse_split(ownership_split)
    url = rpc_url or devnet_rpc_url()
    if url is None:
        raise ConfigError(
            "no devnet is running: start one with `coloco devnet up` or pass --rpc-url"
        )
    if out == DEVNET_DEPLOYMENT and rpc_url is not None and rpc_url != devnet_rpc_url():
        raise ConfigError(
            f"{DEVNET_DEPLOYMENT} is the devnet's own deployment: pass --out for a deployment "
            f"on {rpc_url}"
        )
    if deployer_key is None or committer is None:
        accounts = devnet_accounts()
        deployer_key = deployer_key or accounts[0][1]
        committer = committer or accounts[1][0]
    committee = committee_addresses(code_committee, deployer_key)
    with console.status("deploying contracts (forge script)..."):
        deployment = run_deploy(
            url,
            deployer_key,
            committer=committer,
            out_path=out,
            voting_period=voting_period,
            timelock_delay=timelock_delay,
            initial_inner_steps=inner_steps,
            ownership_split=split,
            code_committee=committee,
        )
    roles = {"committer": deployment.committer, "code_committee": committee,
             "ownership_split_bps": {"compute": split.compute, "capital": split.capital,
                                     "code": split.code}}  # fmt: skip
    if json_out:
        emit_json({"deployment": str(out), "chain_id": deployment.chain_id,
                   "contracts": dict(sorted(deployment.contracts.items())), **roles})  # fmt: skip
        return
    for name, address in sorted(deployment.contracts.items()):
        console.print(f"  {name:<20} {address}")
    console.print(
        f"ownership split: compute {split.compute}, capital {split.capital}, code {split.code} "
        "basis points of each round's reward"
    )
    console.print(f"run organiser (ledger committer, `fund open`): {deployment.committer}")
    console.print(f"code committee (`code approve`): {', '.join(committee) or 'none'}")
    console.print(f"deployment written to [bold]{out}[/]")


def parse_split(text: str) -> OwnershipSplit:
    """`compute=7000,capital=2000,code=1000` (any order, every part named) -> OwnershipSplit."""
    from protocol.deploy import OwnershipSplit

    parts: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or name not in ("compute", "capital", "code") or name in parts:
            raise typer.BadParameter(
                f"{text!r}: name each part once, e.g. {DEFAULT_SPLIT}",
                param_hint="--ownership-split",
            )
        try:
            parts[name] = int(value.replace("_", ""))
        except ValueError:
            raise typer.BadParameter(
                f"{item.strip()!r}: basis points are a whole number", param_hint="--ownership-split"
            ) from None
    if len(parts) != 3:
        missing = ", ".join(n for n in ("compute", "capital", "code") if n not in parts)
        raise typer.BadParameter(f"{text!r} lacks {missing}", param_hint="--ownership-split")
    split = OwnershipSplit(**parts)
    try:
        split.check()
    except DeploymentError as exc:
        raise typer.BadParameter(str(exc), param_hint="--ownership-split") from None
    return split


def committee_addresses(members: list[str] | None, deployer_key: str) -> list[str]:
    """--code-committee values as checksummed addresses: default the deployer; 'none' empty."""
    from eth_account import Account
    from eth_utils.address import is_address, to_checksum_address

    from coloco_cli.common import account_path
    from protocol.keys import keystore_info

    if not members:
        return [str(Account.from_key(deployer_key).address)]
    if [m.lower() for m in members] == ["none"]:
        return []
    out = []
    for member in members:
        if is_address(member):
            out.append(str(to_checksum_address(member)))
            continue
        path = account_path(member) if not member.startswith("0x") else None
        if path is None or not path.is_file():
            raise typer.BadParameter(
                f"{member!r} is neither a 0x address nor a named account (`coloco keys list`)",
                param_hint="--code-committee",
            )
        address = keystore_info(path)[0]
        if address is None:
            raise typer.BadParameter(
                f"named account {member!r} records no address", param_hint="--code-committee"
            )
        out.append(str(to_checksum_address(address)))
    return out


@app.command()
def status(*, json_out: JsonOpt = False) -> None:
    """Say whether the devnet runs, its RPC URL, head block and deployment.

    Example: coloco devnet status
    """
    from protocol.devnet import rpc_call

    url = devnet_rpc_url()
    if url is None:
        raise ChainError("the devnet is down (no live anvil pid in .coloco/devnet/): start it "
                         "with `coloco devnet up`")  # fmt: skip
    head = int(rpc_call(url, "eth_blockNumber"), 16)
    if json_out:
        deployed = str(DEVNET_DEPLOYMENT) if DEVNET_DEPLOYMENT.is_file() else None
        emit_json({"rpc_url": url, "block": head, "pid": running_pid(), "deployment": deployed})
        return
    console.print(f"devnet: [green]up[/] at {url}, block {head}, pid {running_pid()}")
    if DEVNET_DEPLOYMENT.is_file():
        console.print(f"deployment: {DEVNET_DEPLOYMENT}")
    else:
        console.print("deployment: none yet (run `coloco devnet deploy`)")


def _account(index: int) -> tuple[str, str]:
    accounts = devnet_accounts()
    if not 0 <= index < len(accounts):
        raise ConfigError(f"the devnet has accounts 0..{len(accounts) - 1}, not {index}")
    return accounts[index]


@app.command()
def key(
    index: Annotated[int, typer.Argument(help="Account index (0 = deployer).")],
    *,
    json_out: JsonOpt = False,
) -> None:
    """Print the private key of one of the devnet's funded accounts (devnet only).

    Example: OP=$(coloco devnet key 2)
    """
    if json_out:
        emit_json({"index": index, "private_key": _account(index)[1]})
        return
    typer.echo(_account(index)[1])


@app.command()
def address(
    index: Annotated[int, typer.Argument(help="Account index (0 = deployer).")],
    *,
    json_out: JsonOpt = False,
) -> None:
    """Print the (checksummed) address of one of the devnet's funded accounts.

    Example: coloco devnet address 3
    """
    from eth_utils.address import to_checksum_address

    if json_out:
        emit_json({"index": index, "address": to_checksum_address(_account(index)[0])})
        return
    typer.echo(to_checksum_address(_account(index)[0]))


@app.command()
def mine(
    blocks: Annotated[int, typer.Argument(min=1, max=100_000, help="Blocks to mine.")] = 1,
    *,
    seconds: Annotated[
        int, typer.Option(min=0, help="Advance the clock this much first (timelocks).")
    ] = 0,
    rpc_url: RpcUrlOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Mine blocks now (and move the clock): voting periods and timelocks pass on a devnet.

    Example: coloco devnet mine 20 --seconds 2
    """
    from protocol.devnet import rpc_call

    url = rpc_url or devnet_rpc_url()
    if url is None:
        raise ConfigError("no devnet is running: start one with `coloco devnet up`")
    if seconds:
        rpc_call(url, "evm_increaseTime", [seconds])
    rpc_call(url, "anvil_mine", [hex(blocks)])
    head = int(rpc_call(url, "eth_blockNumber"), 16)
    if json_out:
        emit_json({"mined": blocks, "head": head})
        return
    console.print(f"mined {blocks} block(s); head {head}")
