"""One demo run, as verbs: start the network, onboard operators, train, govern, claim, report.

Every process goes through one `ProcessManager`, so whatever happens (success, an error, Ctrl-C)
they are all stopped when `DemoRun` leaves its `with` block.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from coloco_cli.demo.actors import Actor, make_actors, register_and_stake
from coloco_cli.demo.capital import Capital, fund_and_submit, scoped_env, settle
from coloco_cli.demo.gov import GovOutcome, claim_all, govern
from coloco_cli.demo.lease import DemoLease, open_lease, settle_lease
from coloco_cli.demo.net import ADMIN_TOKEN, DemoNet, grant_slasher, start_chain, start_ledger
from coloco_cli.demo.plan import DemoPlan
from coloco_cli.demo.shell import Secret, Shell
from coloco_cli.demo.train import (
    MODEL,
    SEED,
    NodeProc,
    start_node,
    start_rendezvous,
    wait_for_exit,
    wait_for_hold,
    wait_for_round,
    wait_rendezvous,
)
from coloco_cli.procs import ProcessManager
from protocol.errors import ColocoError
from protocol.runs import run_id_of_name
from protocol.types import RunId

if TYPE_CHECKING:
    from protocol.devnet import AnvilProcess

log = logging.getLogger(__name__)


class DemoRun:
    """Holds the demo's processes and state; use as a context manager."""

    def __init__(
        self, plan: DemoPlan, workdir: Path, console: Console, anvil: AnvilProcess | None = None
    ) -> None:
        self.plan = plan
        self.external_anvil = anvil
        self.workdir = workdir
        self.hold_file = workdir / "hold"  # `node run --hold-file`: the nodes wait while it exists
        self.console = console
        self.procs = ProcessManager()
        self.shell = Shell(self.say, workdir / "logs" / "commands.log")
        self.run_name = f"demo-{os.urandom(3).hex()}"  # a fresh run on a chain used before
        self.run_id = run_id_of_name(self.run_name)
        self.net: DemoNet | None = None
        self.actors: list[Actor] = []
        self.nodes: list[NodeProc] = []
        self.rendezvous = ""
        self.gov: GovOutcome | None = None
        self.lease: DemoLease | None = None
        self.claims: list[dict[str, Any]] = []
        self.config_version_start = 0
        self.capital = Capital()  # the backer, the code contributors and the reviewer
        self.started = time.monotonic()

    def __enter__(self) -> DemoRun:
        self.procs.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        started = [{"name": c.name, "pid": c.pid} for c in self.procs.started]
        (self.workdir / "processes.json").write_text(json.dumps(started, indent=1))
        self.step(f"stopping {len(self.procs.children)} processes")
        self.procs.__exit__(exc_type, exc, tb)

    def step(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.started:6.1f}s[/] {text}")

    def say(self, line: str) -> None:
        """A command line the demo runs, printed as a person would type it."""
        self.console.print(
            f"[dim]{time.monotonic() - self.started:6.1f}s   {escape(line)}[/]", highlight=False
        )

    # --- verbs ---------------------------------------------------------------------------------

    def start_network(self) -> DemoNet:
        self.step("starting anvil and deploying the contracts")
        with scoped_env(self.capital.deploy_env()):  # ownership split 80/10/10, the committee
            anvil, deployment, dep_path = start_chain(
                self.procs, self.workdir, self.external_anvil, inner_steps=self.plan.inner_steps
            )
        self.step(f"starting the ledger (SQLite) and the rendezvous; chain {anvil.rpc_url}")
        self.rendezvous, rdv = start_rendezvous(self.procs, self.shell, self.workdir)
        url, ledger = start_ledger(
            self.procs, self.workdir, anvil, dep_path, round_deadline_s=90, shell=self.shell,
            slasher_key=grant_slasher(anvil, deployment),
        )  # fmt: skip
        self.net = DemoNet(self.workdir, anvil, deployment, dep_path, url, ledger)
        self.shell.export(
            COLOCO_RPC_URL=anvil.rpc_url, COLOCO_DEPLOYMENT=str(dep_path), COLOCO_LEDGER_URL=url
        )
        wait_rendezvous(self.rendezvous, rdv)
        self.step(f"ledger at {url}, rendezvous at {self.rendezvous}")
        return self.net

    def onboard(self) -> None:
        net = self.require_net()
        extra = 1 if self.plan.join_after is not None else 0
        self.actors = make_actors(net, self.shell, self.plan.nodes + extra)
        for actor in self.actors:
            register_and_stake(self.shell, actor)
            self.step(
                f"{actor.name}: operator {actor.operator_address[:10]}… registered hot key "
                f"{actor.node_address[:10]}… (payout {actor.payout_address[:10]}…) and staked"
            )

    def configure(self) -> None:
        net = self.require_net()
        self.config_version_start = net.chain().training_config.version()
        opened = self.shell.json(
            "run", "open", self.run_name, "--model", MODEL, "--seed", SEED,
            "--admin-token", Secret(ADMIN_TOKEN, "COLOCO_LEDGER_ADMIN_TOKEN"),
        )  # fmt: skip
        genesis = str(opened["genesis_checkpoint"])
        self.step(
            f"run {self.run_name} (0x{self.run_id.hex()[:12]}…) opened: genesis {genesis[:14]}… "
            f"committed as round 0; TrainingConfig v{self.config_version_start}, "
            f"H={self.plan.inner_steps}"
        )

    def lease_a_node(self) -> None:
        """node-1 offers its hardware; the organiser (a lessee wallet) leases it for the run."""
        self.require_net().fund(self.capital.lessee.address)
        self.lease, lines = open_lease(
            self.shell, self.run_id, self.actors[0], self.capital.lessee_key, self.plan.rounds
        )
        for line in lines:
            self.step(line)

    def settle_lease(self) -> None:
        """After the run (the clock past the dispute windows): the node's pay, the refund."""
        if self.lease is None:
            return
        net = self.require_net()
        last = int(net.chain().last_round(RunId(self.run_id)))
        for line in settle_lease(net, self.shell, self.lease, self.capital.lessee_key, last):
            self.step(line)

    def fund_and_submit_code(self) -> None:
        for line in fund_and_submit(
            self.require_net(), self.shell, self.run_id, self.capital, self.plan.rounds
        ):
            self.step(line)

    def settle_capital(self) -> None:
        nodes = self.actors[: self.plan.nodes]
        net = self.require_net()
        capital, rounds = self.capital, self.plan.rounds
        for line in settle(net, self.shell, self.run_id, capital, nodes=nodes, rounds=rounds):
            self.step(line)

    def train_and_govern(self) -> None:
        net, plan = self.require_net(), self.plan
        initial = self.actors[: plan.nodes]
        # every node holds before the round after the vote's (see _govern)
        self.hold_file.write_text(str(plan.govern_after + 1))
        leaver = initial[-1] if plan.leave_after is not None and plan.nodes >= 2 else None
        for actor in initial:
            leave = plan.leave_after if actor is leaver else None
            self.nodes.append(self._start(actor, leave_after=leave))
        joiner = None
        if plan.join_after is not None:  # started now, warm, released after round join_after
            joiner = self._start(self.actors[plan.nodes], leave_after=None, standby=True)
        self.step(f"{plan.nodes} nodes training ({plan.describe()})")
        events = sorted(
            [(plan.govern_after, "govern")]
            + ([(plan.join_after, "join")] if plan.join_after is not None else []),
            key=lambda e: (e[0], e[1] != "join"),
        )
        for after, what in events:
            if what == "govern":
                self._govern(after)
            elif joiner is not None:
                wait_for_round(net, self.run_id, after, self.nodes, timeout=plan.round_timeout_s)
                joiner.release()
                self.nodes.append(joiner)
                self.step(f"round {after} committed; {joiner.actor.name} joins the run")
        timeout = plan.round_timeout_s * plan.rounds
        with self.console.status(f"training rounds up to {plan.rounds}…"):
            wait_for_round(
                net, self.run_id, plan.rounds, self.nodes, timeout=timeout,
                on_commit=lambda r: self.step(f"round {r}/{plan.rounds} committed on chain"),
            )  # fmt: skip
        wait_for_exit(self.nodes, timeout=plan.round_timeout_s)
        self.step(f"all {plan.rounds} rounds committed on chain")

    def _govern(self, after: int) -> None:
        """Claims and the vote, with the trainers held at the start of round `after` + 1.

        On a real network a vote lasts days and rounds minutes; here rounds take seconds, so every
        node runs with `--hold-file` naming round `after` + 1: it finishes round `after`, waits at
        the boundary (state and heartbeats intact, no join sent) until the vote is executed and
        the demo removes the file, then every node joins round `after` + 1 together and trains it
        with the new config, whatever the machine's speed.
        """
        net, plan = self.require_net(), self.plan
        wait_for_hold(self.nodes, after + 1, timeout=plan.round_timeout_s)
        self.step(f"round {after} done on every node; trainers hold for the vote")
        try:
            wait_for_round(net, self.run_id, after, self.nodes, timeout=plan.round_timeout_s)
            self.step(f"round {after} committed on chain")
            self.claims += claim_all(net, self.shell, self.actors[: plan.nodes])
            self.step(f"{len(self.claims)} contributors claimed; holders vote")
            sets = [f"inner-steps={plan.new_inner_steps}"]
            if plan.new_wire_format is not None:
                sets.append(f"wire-format={plan.new_wire_format}")
            self.gov = govern(net, self.shell, self.actors[: plan.nodes], sets)
        finally:
            self.hold_file.unlink(missing_ok=True)
        self.step(
            f"proposal executed: TrainingConfig v{self.gov.config_version_before} -> "
            f"v{self.gov.config_version_after} (inner steps {self.gov.inner_steps_after}, "
            f"wire format {self.gov.wire_format_after}); trainers go on"
        )

    def final_claims(self) -> None:
        more = claim_all(self.require_net(), self.shell, self.actors)
        self.claims += more
        self.step(f"{len(more)} final claims sent")

    # --- helpers -------------------------------------------------------------------------------

    def _start(self, actor: Actor, *, leave_after: int | None, standby: bool = False) -> NodeProc:
        return start_node(
            self.procs,
            self.shell,
            self.require_net(),
            actor,
            run_id=self.run_id,
            rendezvous=self.rendezvous,
            min_nodes=self.plan.nodes,
            last_round=self.plan.rounds,
            leave_after=leave_after,
            standby=standby,
            hold_file=self.hold_file,
        )

    def require_net(self) -> DemoNet:
        if self.net is None:
            raise ColocoError("internal: the demo's network is not started (start_network first)")
        return self.net
