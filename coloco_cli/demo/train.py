"""The demo's trainers: `coloco node run` processes, the rendezvous, and what they report.

Each node is a separate `coloco node run` process (the operator's own command) with its hot-key
keystore; they meet at the run's `coloco rendezvous serve` and train DiLoCo rounds. Each node
reports one `round_done` JSON line per round it worked to its `--events` file; the demo reads
those, never the node's log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from coloco_cli.node.events import read_events
from coloco_cli.procs import Child, ProcessManager, port_open, wait_until
from protocol.devnet import free_port
from protocol.errors import ColocoError, LedgerError, TrainerError

if TYPE_CHECKING:
    from coloco_cli.demo.actors import Actor
    from coloco_cli.demo.net import DemoNet
    from coloco_cli.demo.shell import Shell

log = logging.getLogger(__name__)

MODEL = "tiny"
SEED = 0


@dataclass
class NodeProc:
    """One running (or finished) trainer node."""

    actor: Actor
    child: Child
    last_round: int | None
    leave_after: int | None
    events: Path
    gate: Path | None = None

    def release(self, timeout: float = 180) -> None:
        """Let a standby node (started with a gate) run: wait until it is warm, open the gate."""
        if self.gate is None:
            return
        ready = self.gate.parent / (self.gate.name + ".ready")
        wait_until(
            ready.exists, timeout=timeout, what=f"{self.actor.name} to warm up", child=self.child
        )
        self.gate.write_text("go")

    def records(self) -> list[dict[str, Any]]:
        """The node's `round_done` events so far (its `--events` JSON lines)."""
        return [e for e in read_events(self.events) if e.get("event") == "round_done"]

    def rounds_worked(self) -> list[int]:
        return sorted({int(r["round"]) for r in self.records()})

    def held(self) -> set[int]:
        """The rounds the node held before (its `held` events: `node run --hold-file`)."""
        return {int(e["round"]) for e in read_events(self.events) if e.get("event") == "held"}


def start_rendezvous(procs: ProcessManager, shell: Shell, workdir: Path) -> tuple[str, Child]:
    """`coloco rendezvous serve` in its own child process; returns ('host:port', child).

    It does not wait: call `wait_rendezvous` (starting torch takes a while on a busy machine, so
    the demo starts the ledger meanwhile).
    """
    port = free_port()
    argv = shell.argv("rendezvous", "serve", "--host", "127.0.0.1", "--port", port)
    child = procs.start("rendezvous", argv, workdir / "logs" / "rendezvous.log")
    return f"127.0.0.1:{port}", child


def wait_rendezvous(address: str, child: Child, timeout: float = 120) -> None:
    host, _, port = address.rpartition(":")
    wait_until(
        lambda: port_open(host, int(port)), timeout=timeout, what="the rendezvous", child=child
    )


def start_node(
    procs: ProcessManager,
    shell: Shell,
    net: DemoNet,
    actor: Actor,
    *,
    run_id: bytes,
    rendezvous: str,
    min_nodes: int,
    last_round: int,
    leave_after: int | None = None,
    batch_size: int = 8,
    standby: bool = False,
    hold_file: Path | None = None,
) -> NodeProc:
    """`coloco node run` for `actor`'s node, as the operator would start it.

    With `standby`, the process warms up and waits for `NodeProc.release()` before it runs.
    """
    from coloco_cli.demo.shell import Secret

    events = net.workdir / "events" / f"{actor.name}.jsonl"
    events.parent.mkdir(parents=True, exist_ok=True)
    args: list[str | int | Path | Secret] = [
        "node", "run",
        "--run-id", "0x" + run_id.hex(),
        "--keystore", actor.keystore,
        "--password-file", actor.password_file,
        "--rendezvous", rendezvous,
        "--checkpoint-dir", net.workdir / "checkpoints" / actor.name,
        "--model", MODEL,
        "--seed", SEED,
        "--batch-size", batch_size,
        "--min-nodes", min_nodes,
        "--collective-timeout", 120,
        "--rounds", last_round,
        "--events", events,
        "--plain",
        # the node's default schedule, the bounded overlap: round r lands a segment into round
        # r+1 (the one-round delay, --overlap, failed the demo's loss check in 3 of 3 runs:
        # round 3 was trained before round 2 landed)
    ]  # fmt: skip
    if leave_after is not None:
        args += ["--leave-after", leave_after]
    if hold_file is not None:
        args += ["--hold-file", hold_file]
    argv = shell.argv(*args)
    gate = net.workdir / "gates" / actor.name if standby else None
    if gate is not None:  # the same command, held at the door until the demo lets it in
        gate.parent.mkdir(parents=True, exist_ok=True)
        argv = [argv[0], "-m", "coloco_cli.demo.standby", str(gate), "--", *argv[3:]]
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **shell.env}
    child = procs.start(actor.name, argv, net.workdir / "logs" / f"{actor.name}.log", env=env)
    log.info("%s started (pid %d)%s", actor.name, child.pid, " on standby" if gate else "")
    return NodeProc(actor, child, last_round, leave_after, events, gate)


def wait_for_hold(nodes: list[NodeProc], round: int, *, timeout: float) -> None:
    """Block until every running node holds before `round` (its `held` event; or it finished)."""
    deadline = time.monotonic() + timeout
    while True:
        check_nodes(nodes)
        pending = [n.actor.name for n in nodes if n.child.alive() and round not in n.held()]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise ColocoError(f"nodes {pending} did not reach round {round} in {timeout:.0f}s")
        time.sleep(0.05)


def check_nodes(nodes: list[NodeProc]) -> None:
    """Raise with the log tail if a node process failed, or stopped before its last round."""
    for node in nodes:
        code = node.child.popen.poll()
        if code is None:
            continue
        final = node.leave_after or node.last_round
        if code != 0:
            why = f"exited with code {code}"
        elif final is not None and final not in node.rounds_worked():
            why = f"exited before its last round ({final})"
        else:
            continue
        raise TrainerError(
            f"{node.actor.name} {why}; its log {node.child.log_path} ends with:\n"
            f"{node.child.log_tail()}"
        )


def wait_for_round(
    net: DemoNet,
    run_id: bytes,
    target: int,
    nodes: list[NodeProc],
    *,
    timeout: float,
    on_commit: Callable[[int], None] | None = None,
) -> int:
    """Block until round `target` of the run is committed on chain and the ledger has recorded
    that commit (its receipt checked: the round's state `committed` or `final`); returns the last
    round committed on chain.

    The chain shows the commit as soon as the ledger's transaction is mined, a moment before the
    ledger reads the receipt; a claim in that moment is answered from the previous root. So the
    wait ends when both agree. `on_commit(round)` is called for each newly committed round seen.
    """
    from protocol.types import RunId

    chain = net.chain()
    deadline = time.monotonic() + timeout
    seen = int(chain.last_round(RunId(run_id)))
    while True:
        last = int(chain.last_round(RunId(run_id)))
        if on_commit is not None:
            for r in range(seen + 1, last + 1):
                on_commit(r)
        seen = max(seen, last)
        if last >= target and _ledger_recorded(net, run_id, target):
            return last
        check_nodes(nodes)
        if not net.ledger.alive():
            raise ColocoError(f"the ledger stopped; its log ends with:\n{net.ledger.log_tail()}")
        if time.monotonic() > deadline:
            raise ColocoError(
                f"round {target} was not committed on chain within {timeout:.0f}s (last "
                f"committed: {last}); see the logs under {net.workdir / 'logs'}"
            )
        time.sleep(0.25)


def _ledger_recorded(net: DemoNet, run_id: bytes, round_: int) -> bool:
    """Whether the ledger has checked the receipt of round `round_`'s commit."""
    try:
        state = net.ledger_get(f"/v1/runs/0x{run_id.hex()}/rounds/{round_}")["state"]
    except (LedgerError, httpx.HTTPError):  # not known yet, or not answering (the caller checks)
        return False
    return state in ("committed", "final")


def wait_for_exit(nodes: list[NodeProc], *, timeout: float) -> None:
    """Wait until every node process has finished its rounds (exit code 0)."""
    deadline = time.monotonic() + timeout
    while any(n.child.alive() for n in nodes):
        check_nodes(nodes)
        if time.monotonic() > deadline:
            running = [n.actor.name for n in nodes if n.child.alive()]
            raise ColocoError(f"nodes {running} did not finish within {timeout:.0f}s")
        time.sleep(0.25)
    check_nodes(nodes)
