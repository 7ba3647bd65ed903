"""`coloco ledger serve`: run the ledger service (uvicorn, structured logs).

One worker on SQLite; ``--workers N`` on PostgreSQL (each serves the API, one leads: see
docs/ledger.md, "Several workers").

Settings come from COLOCO_LEDGER_* environment variables (or a .env file); see docs/ledger.md.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

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
) -> None:
    """Serve the ledger API: migrate the database, index the chain, settle rounds."""
    import uvicorn
    from pydantic import ValidationError

    from ledger.core.config import Settings
    from ledger.core.logs import configure
    from ledger.main import create_app
    from protocol.errors import ConfigError

    configure(log_level, json_logs=json_logs)
    try:
        settings = Settings()
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
        from ledger import db

        db.upgrade(settings.database_url)  # once, before the workers start
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
