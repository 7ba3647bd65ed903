"""`coloco demo`: the whole network on this machine, end to end, through the real CLI paths.

anvil + contracts, the ledger on SQLite, staked operators, DiLoCo nodes as separate processes
settling every round on chain, a node joining and one leaving, contributors claiming, and a
governance vote that changes what the trainers do next round. Writes `--report` (JSON) and a
loss-curve PNG beside it; stops every process it started, even on Ctrl-C or a failure.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from protocol.errors import ColocoError

if TYPE_CHECKING:
    from coloco_cli.demo.run import DemoRun

log = logging.getLogger(__name__)

QUIET_LOGGERS = (
    "httpx", "web3", "urllib3", "matplotlib", "protocol.keys", "protocol.devnet",
    "protocol.deploy", "coloco_cli.demo.net", "coloco_cli.demo.train", "coloco_cli.demo.gov",
)  # fmt: skip


def demo(
    *,
    nodes: Annotated[int, typer.Option(help="Node operators at the start.")] = 3,
    rounds: Annotated[int, typer.Option(help="Outer DiLoCo rounds to settle on chain.")] = 6,
    inner_steps: Annotated[int, typer.Option(help="Inner AdamW steps per round (H).")] = 20,
    report: Annotated[Path, typer.Option(help="Report JSON (a PNG is written beside it).")] = Path(
        "reports/demo.json"
    ),
    churn: Annotated[
        bool, typer.Option(help="A node joins and one leaves mid-run (needs >= 5 rounds).")
    ] = True,
    vote_wire_format: Annotated[
        str | None,
        typer.Option(
            help="The vote also switches the wire format, e.g. sparse (needs >= 5 rounds): the "
            "rounds after it exchange that format."
        ),
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="Keep logs, keys, DB here (default: a temp dir).")
    ] = None,
    rpc_url: Annotated[
        str | None,
        typer.Option(help="Use this running anvil (e.g. `coloco devnet up`) and leave it up."),
    ] = None,
    accounts: Annotated[
        Path | None, typer.Option(help="With --rpc-url: anvil's --config-out accounts JSON.")
    ] = None,
    keep_up: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="After the story, leave the chain, the ledger and its dashboard up (prints the "
            "dashboard's URL) until Ctrl-C.",
        ),
    ] = False,
) -> None:
    """Run the whole network on this machine, end to end.

    Example: coloco demo --nodes 3 --rounds 6 --inner-steps 20 --report reports/demo.json

    On a devnet you keep afterwards: coloco devnet up && coloco demo --rpc-url
    http://127.0.0.1:8545 (the demo deploys its own contracts there and leaves the chain up).
    To explore the result in a browser: coloco demo --keep (Ctrl-C stops everything).
    """
    from coloco_cli.demo.collect import checks, collect
    from coloco_cli.demo.net import attach_anvil
    from coloco_cli.demo.plan import DemoPlan
    from coloco_cli.demo.report import print_summary, write_report
    from coloco_cli.demo.run import DemoRun
    from coloco_cli.devnet.state import ACCOUNTS_FILE

    console = Console()
    if logging.getLogger().level > logging.DEBUG:  # the step lines say it all; -v shows more
        for noisy in QUIET_LOGGERS:
            logging.getLogger(noisy).setLevel(logging.WARNING)
    plan = DemoPlan.make(nodes=nodes, rounds=rounds, inner_steps=inner_steps, churn=churn,
                         wire_format=vote_wire_format)  # fmt: skip
    keep = workdir is not None or rpc_url is not None or keep_up
    work = workdir or Path(tempfile.mkdtemp(prefix="coloco-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    anvil = None
    if rpc_url is not None:
        anvil = attach_anvil(rpc_url, accounts or ACCOUNTS_FILE, work.resolve())
    console.rule(f"coloco demo: {plan.describe()}")
    start = time.monotonic()
    try:
        with DemoRun(plan, work.resolve(), console, anvil) as run:
            run.start_network()
            run.onboard()
            run.configure()
            run.lease_a_node()
            run.fund_and_submit_code()
            run.train_and_govern()
            run.final_claims()
            run.settle_capital()
            run.settle_lease()
            data = collect(run, time.monotonic() - start)
            data.update(run.capital.outcome)
            data["wall_s"] = round(time.monotonic() - start, 2)
            data["checks"] = checks(data, plan.rounds)
            png = write_report(data, report)
            print_summary(data, console)
            console.print(f"report: [bold]{report}[/]  loss curve: [bold]{png}[/]")
            if rpc_url is not None and not keep_up:
                console.print(
                    f"the chain stays up; explore it with COLOCO_RPC_URL={rpc_url} "
                    f"COLOCO_DEPLOYMENT={work / 'deployment.json'} coloco gov list"
                )
            failed = [name for name, ok in data["checks"].items() if not ok]
            if failed:
                keep = True
                raise ColocoError(
                    f"the demo ran but {len(failed)} check(s) failed: {'; '.join(failed)}. "
                    f"See {report} and the logs in {work / 'logs'}"
                )
            if keep_up:
                stay_up(run, console)
    except BaseException:
        console.print(f"[red]demo failed[/]; logs kept in [bold]{work / 'logs'}[/]")
        keep = True
        raise
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def stay_up(run: DemoRun, console: Console) -> None:
    """`--keep`: say where the network is, then wait until Ctrl-C (or SIGTERM) stops it."""
    from coloco_cli.procs import InterruptedBySignalError

    net = run.require_net()
    console.print(f"dashboard: [bold]{net.ledger_url}/[/]")
    console.print(
        f"network kept up: chain {net.rpc_url}, ledger {net.ledger_url}; try `COLOCO_RPC_URL="
        f"{net.rpc_url} COLOCO_LEDGER_URL={net.ledger_url} COLOCO_DEPLOYMENT="
        f"{net.deployment_path} coloco run status 0x{run.run_id.hex()}`. Ctrl-C stops it."
    )
    try:
        while net.ledger.alive():
            time.sleep(0.5)
        raise ColocoError(f"the ledger stopped; its log ends with:\n{net.ledger.log_tail()}")
    except (KeyboardInterrupt, InterruptedBySignalError):
        console.print("stopping the network")
