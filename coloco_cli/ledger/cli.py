"""`coloco ledger serve`: run the ledger service (uvicorn, structured logs).

One worker on SQLite; ``--workers N`` on PostgreSQL (each serves the API, one leads: see
docs/ledger.md, "Several workers").

Settings come from COLOCO_LEDGER_* environment variables (or a .env file); see docs/ledger.md.
The chain and the deployment resolve like every other command's (`coloco_cli.common.resolve`)
when COLOCO_LEDGER_RPC_URL / COLOCO_LEDGER_DEPLOYMENT are not set; on a devnet started by
`coloco devnet up` (development environment, no committer configured) the committer is the
devnet account `coloco devnet deploy` made the committer (account 1).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from coloco_cli.common import (
    DeploymentOpt,
    JsonOpt,
    LedgerUrlOpt,
    RpcUrlOpt,
    emit_json,
    resolve,
)

app = typer.Typer(no_args_is_help=True)
log = logging.getLogger("coloco.ledger")


@app.command()
def serve(
    *,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
    json_logs: Annotated[
        bool, typer.Option("--json-logs/--text-logs", help="One JSON object per log line.")
    ] = True,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes (PostgreSQL only; SQLite runs one).")
    ] = 1,
    rpc_url: RpcUrlOpt = None,
    deployment: DeploymentOpt = None,
) -> None:
    """Serve the ledger API: migrate the database, index the chain, settle rounds."""
    import uvicorn
    from pydantic import ValidationError

    from ledger.core.config import Settings
    from ledger.core.logs import configure
    from ledger.main import create_app
    from protocol.errors import ConfigError

    configure(log_level, json_logs=json_logs)
    overrides = _overrides(rpc_url, deployment)
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        fields = ", ".join(
            "COLOCO_LEDGER_" + str(e["loc"][0]).upper() + f" ({e['msg']})" for e in exc.errors()
        )
        raise ConfigError(f"invalid ledger settings: {fields}") from None
    from ledger.core import secrets

    secrets.register(settings)  # the RPC URL (often with a provider key) is never logged
    log.info("starting ledger on %s:%d (environment %s)", host, port, settings.environment)
    if workers > 1:
        if not settings.database_url.startswith("postgres"):
            raise ConfigError(
                "--workers > 1 needs PostgreSQL (COLOCO_LEDGER_DATABASE_URL=postgresql://...): "
                "SQLite runs one worker"
            )
        from ledger.core import db

        db.upgrade(settings.database_url)  # once, before the workers start
        for key, value in overrides.items():  # each worker builds Settings() from the env
            os.environ.setdefault(f"COLOCO_LEDGER_{key.upper()}", str(value))
    uvicorn.run(
        create_app(settings) if workers == 1 else "ledger.main:create_app",
        factory=workers > 1,
        host=host,
        port=port,
        workers=workers,
        log_config=None,
        access_log=access_log,
        log_level=log_level,
        server_header=False,
    )


@app.command()
def status(
    *,
    ledger_url: LedgerUrlOpt = None,
    wait: Annotated[
        float, typer.Option(min=0, help="Seconds to wait for the ledger to answer (0: ask once).")
    ] = 0,
    json_out: JsonOpt = False,
) -> None:
    """The ledger's health: database, chain head, indexer lag (waits with --wait).

    Example: coloco ledger status --wait 60
    """
    import time

    import httpx

    from protocol.errors import LedgerUnavailableError

    url = resolve(None, ledger_url, None).ledger_url
    deadline = time.monotonic() + wait
    while True:
        try:
            resp = httpx.get(f"{url}/v1/health", timeout=5.0)
            if resp.status_code == 200:
                break
            problem = f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            problem = exc.__class__.__name__
        if time.monotonic() >= deadline:
            raise LedgerUnavailableError(
                f"the ledger at {url} does not answer ({problem}): start it with "
                "`coloco ledger serve` or check --ledger-url"
            )
        time.sleep(0.5)
    health = resp.json()
    if json_out:
        emit_json(health)
        return
    typer.echo(
        f"ledger {url}: {health.get('status')}, database {health.get('database')}, chain head "
        f"{health.get('chain_head')}, indexer lag {health.get('indexer_lag')}"
    )


def _overrides(rpc_url: str | None, deployment: Path | None) -> dict[str, Any]:
    """Settings the shared resolution supplies where the COLOCO_LEDGER_* variables are unset."""
    out: dict[str, Any] = {}
    env = os.environ
    if rpc_url is not None or "COLOCO_LEDGER_RPC_URL" not in env:
        ep = resolve(rpc_url, None, deployment)
        out["rpc_url"] = ep.rpc_url
        if deployment is not None or "COLOCO_LEDGER_DEPLOYMENT" not in env:
            out["deployment"] = ep.deployment_path
    elif deployment is not None:
        out["deployment"] = deployment
    keyless = not any(
        k in env
        for k in ("COLOCO_LEDGER_COMMITTER_KEYSTORE", "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY")
    )
    development = env.get("COLOCO_LEDGER_ENVIRONMENT", "production") == "development"
    dep = out.get("deployment")
    if keyless and development and dep is not None and _is_devnet(Path(dep)):
        from coloco_cli.devnet.cli import devnet_accounts
        from protocol.deployment import Deployment

        committer = str(Deployment.load(Path(dep)).committer).lower()
        for address, key in devnet_accounts():
            if address.lower() == committer:
                out["committer_private_key"] = key
                log.info("devnet: committing rounds as the deployment's committer %s", address)
    return out


def _is_devnet(deployment: Path) -> bool:
    from coloco_cli.devnet.state import DEVNET_DEPLOYMENT

    accounts = DEVNET_DEPLOYMENT.parent / "anvil-accounts.json"
    try:
        same = deployment.resolve() == DEVNET_DEPLOYMENT.resolve()
    except OSError:
        return False
    return same and accounts.is_file()
