"""`coloco rendezvous serve`: host the run's rendezvous store, so that any node may come and go.

Nodes meet at it with `coloco node run --rendezvous HOST:PORT`; without it one node would have to
host it (`--host-rendezvous`) and the run would end when that node leaves.
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.command()
def serve(
    *,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port nodes connect to.")] = 29400,
) -> None:
    """Host the rendezvous store until Ctrl-C or SIGTERM.

    Example: coloco rendezvous serve --host 0.0.0.0 --port 29400
    """
    from coloco_cli.procs import port_open
    from coloco_cli.rendezvous.host import serve as host_store
    from protocol.errors import ConfigError

    if not 0 < port < 65536:
        raise typer.BadParameter(f"{port} is not a TCP port (1-65535)", param_hint="--port")
    if port_open("127.0.0.1" if host in {"0.0.0.0", ""} else host, port):
        raise ConfigError(f"port {port} on {host} is in use: pick another with --port")
    join = f"`coloco node run --rendezvous HOST:{port}`"
    typer.echo(f"rendezvous store on {host}:{port}; nodes join with {join}")
    host_store(host, port)
