"""``coloco node run``: parse, build, train, close. Registered by coloco_cli/node/cli.py.

Exit codes: 0 done; 2 bad settings; 3 chain unreachable or refusing; 4 ledger unreachable or
refusing; 5 peers (rendezvous / collectives) unreachable; 6 a checkpoint failed its hash check.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from protocol.errors import (
    ChainError,
    CheckpointError,
    CollectiveError,
    ColocoError,
    ConfigError,
    LedgerError,
)

log = logging.getLogger(__name__)
EXIT_CODES: tuple[tuple[type[ColocoError], int], ...] = (
    (ChainError, 3), (LedgerError, 4), (CollectiveError, 5), (CheckpointError, 6),
)  # fmt: skip


def parse_run_id(text: str) -> bytes:
    """A 0x-prefixed 32-byte hex id, or any other name (its sha256 is the id)."""
    if text.startswith("0x"):
        try:
            raw = bytes.fromhex(text[2:])
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise ConfigError(f"--run-id {text!r}: a 0x id must be 32 bytes (64 hex digits)")
        return raw
    return hashlib.sha256(text.encode()).digest()


def parse_hostport(text: str, flag: str = "--rendezvous") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{flag} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:29400")
    return host or "127.0.0.1", int(port)


def run_command(  # noqa: PLR0917 - typer maps each parameter to a flag
    run_id: Annotated[str, typer.Option(help="Run id: 0x + 64 hex digits, or a name.")],
    keystore: Annotated[
        Path, typer.Option(envvar="COLOCO_KEYSTORE", help="Node hot key keystore JSON.")
    ],
    password_file: Annotated[
        Path | None,
        typer.Option(
            envvar="COLOCO_PASSWORD_FILE", help="Keystore password file (else $COLOCO_PASSWORD)."
        ),
    ] = None,
    rpc_url: Annotated[
        str | None,
        typer.Option(
            envvar="COLOCO_RPC_URL",
            help="Chain RPC; omit to train with --inner-steps etc. (offline).",
        ),
    ] = None,
    deployment: Annotated[
        Path | None,
        typer.Option(envvar="COLOCO_DEPLOYMENT", help="Deployment JSON (needed with --rpc-url)."),
    ] = None,
    ledger_url: Annotated[
        str | None,
        typer.Option(
            envvar="COLOCO_LEDGER_URL", help="Ledger API; omit to sign without submitting."
        ),
    ] = None,
    rendezvous: Annotated[
        str, typer.Option(help="HOST:PORT of the rendezvous store.")
    ] = "127.0.0.1:29400",
    successor_endpoint: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT where this node hosts the rendezvous if the host dies and "
            "it is the successor (the lowest member address that set one)."
        ),
    ] = None,
    serve_checkpoints: Annotated[
        str,
        typer.Option(
            help="HOST:PORT where this node serves its checkpoints to joining peers "
            "(HOST must be reachable by the other members; port 0: any free port)."
        ),
    ] = "127.0.0.1:0",
    host_rendezvous: Annotated[
        bool, typer.Option(help="Host the rendezvous store in this node.")
    ] = False,
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N.")] = "cpu",
    data: Annotated[
        str | None, typer.Option(help="Folder of .txt/.jsonl/.parquet; default: the Python stdlib.")
    ] = None,
    checkpoint_dir: Annotated[
        Path, typer.Option(help="Where round checkpoints are written.")
    ] = Path(".coloco/checkpoints"),
    model: Annotated[str, typer.Option(help="Model preset: tiny, small, medium, large.")] = "tiny",
    seed: Annotated[int, typer.Option(help="Genesis seed of the run.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Rows per inner step on this node.")] = 8,
    rounds: Annotated[int | None, typer.Option(help="Stop after this round number.")] = None,
    leave_after: Annotated[int | None, typer.Option(help="Leave the run after this round.")] = None,
    hold_file: Annotated[
        Path | None,
        typer.Option(
            help="While this file exists, do not start a new round (keep state and heartbeats; "
            "a round number in it: hold before that round only). Remove it to go on."
        ),
    ] = None,
    time_box: Annotated[
        bool,
        typer.Option(
            help="Heterogeneous nodes: run only the inner steps that fit H + 1 steps at the "
            "fastest member's pace of the round before, and declare them (paid by tokens)."
        ),
    ] = False,
    min_nodes: Annotated[int, typer.Option(help="Nodes the first round waits for.")] = 1,
    join_window: Annotated[
        float, typer.Option(help="Seconds a round boundary waits for joiners.")
    ] = 1.0,
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds to reach the rendezvous before giving up.")
    ] = 20.0,
    collective_timeout: Annotated[
        float, typer.Option(help="Seconds before a silent peer is dropped.")
    ] = 30.0,
    heartbeat_timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds without a peer's heartbeat before it is dropped from a collective "
            "or not waited for at a round boundary (0: off; keep it above the longest pause "
            "a loaded machine makes).",
        ),
    ] = 5.0,
    inner_steps: Annotated[int, typer.Option(help="Offline only: H.")] = 20,
    inner_lr: Annotated[float, typer.Option(help="Offline only: inner AdamW lr.")] = 3e-3,
    wire_format: Annotated[str, typer.Option(help="Offline only: fp32, bf16 or int8.")] = "fp32",
    plain: Annotated[bool, typer.Option(help="No live table; log lines only.")] = False,
) -> None:
    """Train DiLoCo rounds with the other nodes of a run; sign and submit every round.

    Example: coloco node run --run-id demo --keystore node.json --rpc-url http://127.0.0.1:8545
    --deployment .coloco/devnet/deployment.json --ledger-url http://127.0.0.1:8000
    """
    console = Console(stderr=True)
    try:
        runner = _build(**locals())
        if plain:
            runner.run()
            return
        from trainer.round.progress import NodeProgress

        with NodeProgress(runner.address, console) as progress:
            runner.on_step, runner.on_round = progress.on_step, progress.on_round
            runner.run()
    except ColocoError as exc:
        code = next((c for cls, c in EXIT_CODES if isinstance(exc, cls)), 2)
        console.print(f"[bold red]error[/] ({exc.code}): {exc.message}")
        raise typer.Exit(code) from exc


def _endpoint(value: object) -> str | None:
    if value is None:
        return None
    host, port = parse_hostport(str(value))
    return f"{host}:{port}"


def _build(**o: object):  # type: ignore[no-untyped-def]
    """Wire the parts together from the parsed options (keeps run_command a parser only)."""
    from protocol.eip712 import Eip712Domain
    from protocol.keys import load_node_key, read_password
    from reference.model import GPTConfig
    from trainer.network.ledger_client import LedgerClient
    from trainer.network.membership import MembershipConfig
    from trainer.round.attest import Attester
    from trainer.round.node import NodeRunner, NodeSettings
    from trainer.round.progress import round_record
    from trainer.round.recovery import Recovery
    from trainer.round.runconfig import ChainConfig, ConfigSource, RunConfig, StaticConfig

    run_id = parse_run_id(str(o["run_id"]))
    host, port = parse_hostport(str(o["rendezvous"]))
    pw_file = o["password_file"]
    password = read_password(password_file=pw_file if isinstance(pw_file, Path) else None,
                             prompt=os.isatty(0))  # fmt: skip
    key = load_node_key(Path(str(o["keystore"])), password)
    cfg = GPTConfig.preset(str(o["model"]))
    batch = int(str(o["batch_size"]))
    chain = None
    source: ConfigSource
    if o["rpc_url"]:
        from protocol.chain import ChainClient
        from protocol.deployment import Deployment

        if o["deployment"] is None:
            raise ConfigError("--rpc-url needs --deployment PATH (the deployment JSON)")
        chain = ChainClient(str(o["rpc_url"]), Deployment.load(Path(str(o["deployment"]))))
        chain.check_chain()
        source = ChainConfig(chain, batch_size=batch)
        domain = chain.attestation_domain()
    else:
        source = StaticConfig(RunConfig.make(inner_steps=int(str(o["inner_steps"])),
                                             inner_lr=float(str(o["inner_lr"])), batch_size=batch,
                                             wire_format=str(o["wire_format"])))  # fmt: skip
        domain = Eip712Domain(chain_id=31337, verifying_contract=key.address)
        log.warning("offline: no --rpc-url, config from flags; attestations are not submittable")
    ledger = LedgerClient(str(o["ledger_url"])) if o["ledger_url"] else None
    if ledger is not None:
        ledger.health()
    serve_host, serve_port = parse_hostport(str(o["serve_checkpoints"]), "--serve-checkpoints")
    settings = NodeSettings(
        run_id=run_id, model=cfg, rendezvous_host=host, rendezvous_port=port,
        host_rendezvous=bool(o["host_rendezvous"]), seed=int(str(o["seed"])),
        own_endpoint=_endpoint(o["successor_endpoint"]),
        serve_host=serve_host, serve_port=serve_port,
        membership=MembershipConfig(min_nodes=int(str(o["min_nodes"])),
                                    join_window_s=float(str(o["join_window"])),
                                    collective_timeout_s=float(str(o["collective_timeout"])),
                                    heartbeat_timeout_s=float(str(o["heartbeat_timeout"])),
                                    connect_timeout_s=float(str(o["connect_timeout"]))),
        device=str(o["device"]), data_path=None if o["data"] is None else str(o["data"]),
        checkpoint_dir=Path(str(o["checkpoint_dir"])), max_rounds=o["rounds"],  # type: ignore[arg-type]
        leave_after_round=o["leave_after"],  # type: ignore[arg-type]
        hold_file=o["hold_file"],  # type: ignore[arg-type]
        time_box=bool(o["time_box"]),
    )  # fmt: skip
    recovery = Recovery(run_id, cfg, settings.seed, chain=chain, ledger=ledger)
    runner = NodeRunner(settings, Attester(key, domain, run_id, ledger), source, recovery=recovery)
    runner.on_round = lambda report: log.info("%s", round_record(report))
    return runner
