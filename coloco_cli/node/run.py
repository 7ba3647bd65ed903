"""`coloco node run`: the trainer's command (`trainer/cli.py`) with the CLI's settings around it.

The command's options are one typed tree, `NodeRunOptions`: the trainer's own groups
(`trainer.options`: network, training, static settings) and its run id and `--plain`, with
three groups of the CLI's in place of the trainer's:
- `HotKey`: `--keystore PATH` (environment `COLOCO_NODE_KEYSTORE`; `COLOCO_KEYSTORE` is the
  transaction sender everywhere) or a named account `--account NAME`;
- `ChainAndLedger`: the chain, the deployment and the ledger resolve like every other command's
  (flag, environment, `coloco.toml`, the devnet / the connected chain's deployment, the local
  ledger), and the node refuses to start without them unless told `--offline` (no silent
  training that earns nothing);
- `CheckpointFolder`: the default folder is per run and per key, so two nodes (or two runs)
  never resume from each other's files;
and `--events PATH`, which appends one JSON object per round the node worked (`round_done`) and
per hold at a round boundary (`held`, see `--hold-file`) to PATH (`coloco_cli.node.events`).
`run_node` resolves them into the trainer's `NodeOptions` and runs it; off a terminal its log
lines are JSON objects, one a line (`coloco_cli.node.logfmt`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from coloco_cli.common import DeploymentOpt, LedgerUrlOpt, RpcUrlOpt, account_path, resolve
from coloco_cli.node.events import EventsWriter
from coloco_cli.node.logfmt import json_lines_off_a_terminal
from protocol.errors import ColocoError, ConfigError
from trainer.cli import exit_code, parse_run_id
from trainer.cli import run as run_trainer
from trainer.flags import TreeCommand
from trainer.options import (
    Checkpoints,
    Endpoints,
    Identity,
    Network,
    NodeOptions,
    PasswordFile,
    Plain,
    RunId,
    StaticSettings,
    Training,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HotKey:
    """The node's hot key: a keystore file, or a named account (`coloco keys list`)."""

    keystore: Annotated[
        Path | None,
        typer.Option(
            "--keystore",
            envvar="COLOCO_NODE_KEYSTORE",
            help="The node's hot key (keystore JSON); or --account NAME.",
        ),
    ] = None
    password_file: PasswordFile = None
    account: Annotated[
        str | None,
        typer.Option(
            "--account", help="The node's hot key as a named account (`coloco keys list`)."
        ),
    ] = None

    def resolve(self) -> Identity:
        """The keystore to load: `--keystore` or `--account`'s, exactly one of them."""
        if self.keystore is not None and self.account is not None:
            raise ConfigError("pass the node's key once: --keystore PATH or --account NAME")
        if self.account is not None:
            path = account_path(self.account)
            if not path.is_file():
                raise ConfigError(
                    f"no account named {self.account!r}: create it with "
                    f"`coloco keys new --name {self.account}`"
                )
            return Identity(path, self.password_file)
        if self.keystore is None:
            raise ConfigError(
                "the node needs its hot key: --account NAME (`coloco keys new --name NAME`) or "
                "--keystore PATH (or COLOCO_NODE_KEYSTORE)"
            )
        return Identity(self.keystore, self.password_file)


@dataclass(frozen=True)
class ChainAndLedger:
    """The chain, the deployment and the ledger, resolved like every command's; or none."""

    rpc_url: RpcUrlOpt = None
    deployment: DeploymentOpt = None
    ledger_url: LedgerUrlOpt = None
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="Train without a chain and a ledger (config from flags; earns nothing).",
        ),
    ] = False

    def resolve(self) -> Endpoints:
        """The trainer's endpoints: the shared resolution, or none with `--offline`."""
        if self.offline:
            given = [k for k, v in (("rpc_url", self.rpc_url), ("ledger_url", self.ledger_url))
                     if v is not None]  # fmt: skip
            if given:
                raise ConfigError(
                    f"--offline trains without a chain and a ledger, but {', '.join(given)} is "
                    "set: drop --offline to earn rewards, or unset them"
                )
            return Endpoints()
        ep = resolve(self.rpc_url, self.ledger_url, self.deployment)
        log.info("chain %s, deployment %s, ledger %s (run with --offline to train without them)",
                 ep.rpc_url, ep.deployment_path, ep.ledger_url)  # fmt: skip
        return Endpoints(ep.rpc_url, ep.deployment_path, ep.ledger_url)


@dataclass(frozen=True)
class CheckpointFolder:
    """Round checkpoints: by default a folder per run and per key."""

    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(help="Round checkpoints (default .coloco/checkpoints/<run>/<key>)."),
    ] = None

    def resolve(self, run_id: str, keystore: Path) -> Checkpoints:
        if self.checkpoint_dir is not None:
            return Checkpoints(self.checkpoint_dir)
        run_key = parse_run_id(run_id).hex()[:16]
        return Checkpoints(Path(".coloco") / "checkpoints" / run_key / keystore.stem)


@dataclass(frozen=True)
class NodeRunOptions:
    """Everything `coloco node run` is told: the trainer's tree with the CLI's own groups."""

    run_id: RunId
    identity: HotKey = field(default_factory=HotKey)
    endpoints: ChainAndLedger = field(default_factory=ChainAndLedger)
    network: Network = field(default_factory=Network)
    training: Training = field(default_factory=Training)
    static: StaticSettings = field(default_factory=StaticSettings)
    checkpoints: CheckpointFolder = field(default_factory=CheckpointFolder)
    plain: Plain = False
    events: Annotated[
        Path | None,
        typer.Option(
            "--events",
            help="Append one JSON line per round worked (round_done) or held (held) here.",
        ),
    ] = None


def run_node(o: NodeRunOptions) -> None:
    """Train DiLoCo rounds with the other nodes of a run; sign and submit every round.

    Without --offline, the chain, deployment and ledger are required (resolved like every
    command's); --events PATH writes one JSON line per round.
    """
    try:
        identity = o.identity.resolve()
        endpoints = o.endpoints.resolve()
    except ColocoError as exc:  # the trainer's documented exit codes (3 chain, 4 ledger, ...)
        typer.echo(f"error ({exc.code}): {exc.message}", err=True)
        raise typer.Exit(exit_code(exc)) from None
    options = NodeOptions(
        o.run_id, identity, endpoints, o.network, o.training, o.static,
        o.checkpoints.resolve(o.run_id, identity.keystore), o.plain,
    )  # fmt: skip
    handler = EventsWriter(o.events) if o.events is not None else None
    if handler is not None:
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    try:
        with json_lines_off_a_terminal():
            run_trainer(options)
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)


def build_run_command() -> TreeCommand[NodeRunOptions]:
    """The `node run` command: one flag per leaf of `NodeRunOptions`."""
    return TreeCommand(NodeRunOptions, run_node)
