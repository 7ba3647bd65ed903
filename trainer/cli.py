"""``coloco node run``: parse, build, train, close. Registered by coloco_cli/node/cli.py.

The flags are the leaves of :class:`trainer.options.NodeOptions` (:data:`run_command`); the
command fills that tree once and :func:`build` wires it into a node.

Exit codes: 0 done; 2 bad settings; 3 chain unreachable or refusing (an unregistered or unstaked
node too); 4 ledger unreachable or refusing (also at a stop, SIGTERM or Ctrl-C, with signed rounds
it could not send: they are named, and stay in the journal for the next start); 5 peers
(rendezvous / collectives) unreachable; 6 a checkpoint failed its hash check.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

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
from protocol.runs import run_id_of_name
from trainer.flags import TreeCommand
from trainer.options import NodeOptions

if TYPE_CHECKING:
    from trainer.round.node import NodeRunner

log = logging.getLogger(__name__)
EXIT_CODES: tuple[tuple[type[ColocoError], int], ...] = (
    (ChainError, 3), (LedgerError, 4), (CollectiveError, 5), (CheckpointError, 6),
)  # fmt: skip


def parse_run_id(text: str, *, what: str = "--run-id") -> bytes:
    """A 0x-prefixed 32-byte hex id, or any other name (its sha256 is the id); `what` names the
    argument in the error."""
    if text.startswith("0x"):
        try:
            raw = bytes.fromhex(text[2:])
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise ConfigError(
                f"{what} {text!r}: a 0x id must be 32 bytes (64 hex digits); any other name "
                "is hashed (sha256) into the id, as `coloco node run --run-id` does"
            )
        return raw
    return run_id_of_name(text)


def parse_hostport(text: str, flag: str = "--rendezvous") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{flag} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:29400")
    return host or "127.0.0.1", int(port)


def run(options: NodeOptions) -> None:
    """Train DiLoCo rounds with the other nodes of a run; sign and submit every round.

    Example: coloco node run --run-id demo --keystore node.json --rpc-url http://127.0.0.1:8545
    --deployment .coloco/devnet/deployment.json --ledger-url http://127.0.0.1:8000
    """
    console = Console(stderr=True)
    try:
        runner = build(options)
        with _stop_on_sigterm():
            try:
                _train(runner, options, console)
            except (Stopped, KeyboardInterrupt):
                runner.leave_journal(STOP_WAIT_S)  # exit 4 naming what it could not send
                console.print(f"stopped; no unsent rounds (round {runner.round_now} unfinished)")
    except ColocoError as exc:
        code = exit_code(exc)
        console.print(f"[bold red]error[/] ({exc.code}): {exc.message}")
        raise typer.Exit(code) from exc


STOP_WAIT_S = 10.0
"""At SIGTERM or Ctrl-C: how long the node tries to send its unsent rounds before exit 4."""


class Stopped(BaseException):
    """SIGTERM (a BaseException, like KeyboardInterrupt, so no ``except Exception`` eats it)."""


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`Stopped` in the main thread while the node runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Stopped()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _train(runner: NodeRunner, options: NodeOptions, console: Console) -> None:
    if options.plain or not console.is_terminal:  # off a TTY: log lines only
        runner.run()
        return
    from trainer.round.progress import LedgerEarnings, NodeProgress

    ledger_url = options.endpoints.ledger_url
    earnings = None
    if ledger_url:
        earnings = LedgerEarnings(ledger_url, runner.address, parse_run_id(options.run_id))
    with NodeProgress(runner.address, console, earnings) as progress:
        runner.on_step, runner.on_round = progress.on_step, progress.on_round
        runner.run()


run_command = TreeCommand(NodeOptions, run)
"""The trainer's command: one flag per leaf of :class:`NodeOptions`."""


def exit_code(exc: ColocoError) -> int:
    """The documented exit code of an error (module docstring); 2 for bad settings."""
    return next((c for cls, c in EXIT_CODES if isinstance(exc, cls)), 2)


def build(options: NodeOptions) -> NodeRunner:
    """Wire the parts together from the options (keeps the command a parser only)."""
    from protocol.eip712 import Eip712Domain
    from protocol.keys import load_node_key, read_password
    from reference.model import GPTConfig
    from trainer.network.ledger_client import LedgerClient
    from trainer.network.membership import MembershipConfig
    from trainer.round.attest import Attester
    from trainer.round.node import NodeRunner, NodeSettings
    from trainer.round.progress import log_round
    from trainer.round.recovery import Recovery
    from trainer.round.runconfig import ChainConfig, ConfigSource, RunConfig, StaticConfig

    ends, net, train, static = options.endpoints, options.network, options.training, options.static
    run_id = parse_run_id(options.run_id)
    host, port = parse_hostport(net.rendezvous)
    password = read_password(password_file=options.identity.password_file, prompt=os.isatty(0))
    key = load_node_key(options.identity.keystore, password)
    cfg = GPTConfig.preset(train.model)
    chain = None
    source: ConfigSource
    if ends.rpc_url:
        from protocol.chain import ChainClient
        from protocol.deployment import Deployment

        if ends.deployment is None:
            raise ConfigError("--rpc-url needs --deployment PATH (the deployment JSON)")
        chain = ChainClient(ends.rpc_url, Deployment.load(ends.deployment))
        chain.check_chain()
        source = ChainConfig(chain, batch_size=train.batch_size)
        domain = chain.attestation_domain()
    else:
        source = StaticConfig(RunConfig.make(inner_steps=static.inner_steps,
                                             inner_lr=static.inner_lr, batch_size=train.batch_size,
                                             wire_format=static.wire_format))  # fmt: skip
        domain = Eip712Domain(chain_id=31337, verifying_contract=key.address)
        log.warning("offline: no --rpc-url, config from flags; attestations are not submittable")
    ledger = LedgerClient(ends.ledger_url) if ends.ledger_url else None
    if ledger is not None:
        ledger.health()
    serve_host, serve_port = parse_hostport(net.serve_checkpoints, "--serve-checkpoints")
    from trainer.round.boundaries import LINGER_S

    settings = NodeSettings(
        run_id=run_id, model=cfg, rendezvous_host=host, rendezvous_port=port,
        host_rendezvous=net.host_rendezvous, seed=train.seed,
        own_endpoint=_endpoint(net.successor_endpoint),
        serve_host=serve_host, serve_port=serve_port,
        membership=MembershipConfig(min_nodes=net.min_nodes, join_window_s=net.join_window,
                                    collective_timeout_s=net.collective_timeout,
                                    heartbeat_timeout_s=net.heartbeat_timeout,
                                    connect_timeout_s=net.connect_timeout),
        device=train.device, bf16=train.bf16, data_path=train.data,
        checkpoint_dir=options.checkpoints.checkpoint_dir, max_rounds=train.rounds,
        leave_after_round=train.leave_after, hold_file=train.hold_file, time_box=train.time_box,
        overlap=train.overlap, bounded_overlap=train.bounded_overlap,
        local_ranks=train.local_ranks,
        audit_linger_s=LINGER_S if ledger is not None else 0.0,
    )  # fmt: skip
    recovery = Recovery(run_id, cfg, settings.seed, chain=chain, ledger=ledger)
    # the attestation goes out from a sender thread: the inner steps do not wait for its upload
    attester = Attester(key, domain, run_id, ledger, background=True)
    runner = NodeRunner(settings, attester, source, recovery=recovery)
    runner.on_round = log_round
    return runner


def _endpoint(value: str | None) -> str | None:
    if value is None:
        return None
    host, port = parse_hostport(value)
    return f"{host}:{port}"
