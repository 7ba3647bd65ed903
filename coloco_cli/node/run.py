"""`coloco node run`: the trainer's command (`trainer/cli.py: run_command`) with the CLI settings.

Every option of the trainer's command is kept; on top of it:
- the chain, the deployment and the ledger resolve like every other command's (flag, environment,
  `coloco.toml`, the devnet / the connected chain's deployment, the local ledger), and the node
  refuses to start without them unless told `--offline` (no silent training that earns nothing);
- the hot key is `--keystore PATH` (environment `COLOCO_NODE_KEYSTORE`; `COLOCO_KEYSTORE` is the
  transaction sender everywhere) or a named account `--account NAME`;
- `--events PATH` appends one JSON object per round the node worked (`round_done`) and per hold at
  a round boundary (`held`, see `--hold-file`) to PATH;
- the default checkpoint folder is per run and per key, so two nodes (or two runs) never resume
  from each other's files.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from protocol.errors import ColocoError, ConfigError

log = logging.getLogger(__name__)

NodeKeystoreOpt = Annotated[
    Path | None,
    typer.Option(
        "--keystore",
        envvar="COLOCO_NODE_KEYSTORE",
        help="The node's hot key (keystore JSON); or --account NAME.",
    ),
]
NodeAccountOpt = Annotated[
    str | None,
    typer.Option("--account", help="The node's hot key as a named account (`coloco keys list`)."),
]
OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Train without a chain and a ledger (config from flags; earns nothing).",
    ),
]
EventsOpt = Annotated[
    Path | None,
    typer.Option(
        "--events", help="Append one JSON line per round worked (round_done) or held (held) here."
    ),
]
CheckpointDirOpt = Annotated[
    Path | None,
    typer.Option(help="Round checkpoints (default .coloco/checkpoints/<run>/<key>)."),
]


EVENTS = ("round_done", "held")  # a round worked; a hold at a round boundary (trainer.round.hold)


class EventsWriter(logging.Handler):
    """Writes the trainer's `round_done` and `held` records (logged as a dict, or `round_done` as
    JSON) as JSON lines."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        event = _round_event(record)
        if event is None:
            return
        line = json.dumps(event, sort_keys=True)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()


def _round_event(record: logging.LogRecord) -> dict[str, Any] | None:
    args = record.args
    if isinstance(args, dict) and args.get("event") in EVENTS:
        return dict(args)
    if isinstance(record.msg, str) and record.msg.startswith('{"event": "round_done"'):
        try:
            value = json.loads(record.msg)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None
    return None


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events a node wrote with `--events` (a partial last line is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def build_run_command() -> Callable[..., None]:
    """The `node run` command: the trainer's options with the CLI's settings around them."""
    from trainer.cli import EXIT_CODES, parse_run_id, run_command

    hints = typing.get_type_hints(run_command, include_extras=True)
    from coloco_cli.common import DeploymentOpt, LedgerUrlOpt, RpcUrlOpt

    replaced = {
        "keystore": (NodeKeystoreOpt, None),
        "checkpoint_dir": (CheckpointDirOpt, None),
        "rpc_url": (RpcUrlOpt, None),
        "ledger_url": (LedgerUrlOpt, None),
        "deployment": (DeploymentOpt, None),
    }
    params = []
    for p in inspect.signature(run_command).parameters.values():
        annotation, default = replaced.get(p.name, (hints[p.name], p.default))
        params.append(p.replace(annotation=annotation, default=default, kind=p.KEYWORD_ONLY))
    extra: dict[str, tuple[Any, Any]] = {
        "account": (NodeAccountOpt, None),
        "offline": (OfflineOpt, False),
        "events": (EventsOpt, None),
    }
    for name, (annotation, value) in extra.items():
        kind = inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(name, kind, annotation=annotation, default=value))

    def run(**options: Any) -> None:
        account, offline, events = (options.pop(k) for k in ("account", "offline", "events"))
        try:
            options["keystore"] = _hot_key(options["keystore"], account)
            _resolve_endpoints(options, offline=offline)
        except ColocoError as exc:  # the trainer's documented exit codes (3 chain, 4 ledger, ...)
            code = next((c for cls, c in EXIT_CODES if isinstance(exc, cls)), 2)
            typer.echo(f"error ({exc.code}): {exc.message}", err=True)
            raise typer.Exit(code) from None
        if options["checkpoint_dir"] is None:
            run_key = parse_run_id(str(options["run_id"])).hex()[:16]
            options["checkpoint_dir"] = (
                Path(".coloco") / "checkpoints" / run_key / Path(options["keystore"]).stem
            )
        handler = EventsWriter(events) if events is not None else None
        if handler is not None:
            logging.getLogger().addHandler(handler)
            logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
        try:
            run_command(**options)
        finally:
            if handler is not None:
                logging.getLogger().removeHandler(handler)

    run.__doc__ = (
        f"{inspect.getdoc(run_command)}\n\nWithout --offline, the chain, deployment and ledger "
        "are required (resolved like every command's); --events PATH writes one JSON line per "
        "round."
    )
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


def _hot_key(keystore: Path | None, account: str | None) -> Path:
    from coloco_cli.common import account_path

    if keystore is not None and account is not None:
        raise ConfigError("pass the node's key once: --keystore PATH or --account NAME")
    if account is not None:
        path = account_path(account)
        if not path.is_file():
            raise ConfigError(
                f"no account named {account!r}: create it with `coloco keys new --name {account}`"
            )
        return path
    if keystore is None:
        raise ConfigError(
            "the node needs its hot key: --account NAME (`coloco keys new --name NAME`) or "
            "--keystore PATH (or COLOCO_NODE_KEYSTORE)"
        )
    return keystore


def _resolve_endpoints(options: dict[str, Any], *, offline: bool) -> None:
    """Fill rpc_url / deployment / ledger_url from the shared resolution (or clear them)."""
    from coloco_cli.common import resolve

    if offline:
        given = [k for k in ("rpc_url", "ledger_url") if options[k] is not None]
        if given:
            raise ConfigError(
                f"--offline trains without a chain and a ledger, but {', '.join(given)} is set: "
                "drop --offline to earn rewards, or unset them"
            )
        options["deployment"] = None
        return
    ep = resolve(options["rpc_url"], options["ledger_url"], options["deployment"])
    options["rpc_url"] = ep.rpc_url
    options["ledger_url"] = ep.ledger_url
    options["deployment"] = ep.deployment_path
    log.info(
        "chain %s, deployment %s, ledger %s (run with --offline to train without them)",
        ep.rpc_url,
        ep.deployment_path,
        ep.ledger_url,
    )
