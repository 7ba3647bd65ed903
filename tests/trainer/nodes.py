"""Real trainer nodes in real processes for the trainer tests (imported by each forked node).

`start_nodes(plans, port)` starts one process per plan, each running a full
:class:`trainer.round.node.NodeRunner` (rendezvous over the parent's TCPStore, gloo process groups,
checkpoints, signed attestations), and `collect` returns each node's round records, or None for
a node that died on purpose.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import forked

# anvil's well-known development keys (public test keys, never real funds).
DEV_KEYS = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83e6ac0d3b4f24ff3e0d29f6a3b86e5c3e8a79f5a1d9",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9e0b0d5bd9b2d0a8e0c3f0f4a71",
]
RUN_ID = bytes.fromhex("ab" * 32)


@dataclass
class Plan:
    key: int
    rounds: int | None = None
    leave_after: int | None = None
    start_delay_s: float = 0.0
    join_after_round: int = 0  # wait until this round's member list closed, then join
    die_in_round: int | None = None
    die_after_mean: bool = False  # overlap: crash once the round in flight has its mean
    diverge_in_round: int | None = None  # a faulty machine: its outer step gives other bits
    checkpoint_dir: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    min_nodes: int = 1
    join_window_s: float = 1.0
    collective_timeout_s: float = 8.0
    private_key: str | None = None  # else DEV_KEYS[key]
    rpc_url: str | None = None  # with deployment: config, registry and hashes from this chain
    deployment: str | None = None
    own_endpoint: str | None = None  # where this node hosts the rendezvous as a successor
    config_wait_s: float = 10.0
    failover_wait_s: float = 30.0
    serve_corrupt: bool = False  # a dishonest member: every chunk it serves is altered
    chunk_bytes: int = 1 << 20  # checkpoint chunk size peer to peer
    stall_in_round: int | None = None  # SIGSTOP itself mid-round (the test sends SIGCONT)
    heartbeat_timeout_s: float = 5.0
    overlap: bool = False
    """NodeSettings.overlap, passed explicitly: these tests place their faults in lockstep
    rounds; the node's default (True, the one-round delayed outer step) is the overlap tests'."""
    bounded_overlap: bool = False  # NodeSettings.bounded_overlap (trainer.round.bounded)
    ledger_url: str | None = None  # attestations, joins and member lists through this ledger
    late_first_join: bool = False  # its first ledger join waits until that round started there
    late_first_round: bool = False  # its first round starts once the others opened that round
    late_in_window: bool = False  # its first round starts once the others joined it; its ledger
    # join of that round lands once their list opened (a slow round trip at their window's end)
    rendezvous_timeout_s: float = 60.0
    no_show_s: float = 5.0  # MembershipConfig.no_show_s (F12)
    hold_file: str | None = None  # NodeSettings.hold_file (trainer.round.hold)
    events: str | None = None  # `node run --events`: the trainer's round_done and held records
    time_box: bool = False  # NodeSettings.time_box (trainer.round.timebox)
    step_sleep_s: float = 0.0  # a slower machine: every inner step takes this much longer
    forge_in_round: int | None = None  # commits to its packet, sends its peers another (F6)
    run_id: bytes = RUN_ID  # another run on the same rendezvous (test_rendezvous_reuse)
    local_ranks: int = 1  # NodeSettings.local_ranks (trainer.round.ranks)
    after_ready: int | None = None  # start once node k's NodeRunner is built (its ranks up)


def _node_main(plan: Plan, port: int, data_dir: str, results: Any) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from protocol.eip712 import Eip712Domain
    from protocol.keys import NodeKey
    from reference.model import GPTConfig
    from trainer.network.membership import MembershipConfig
    from trainer.round.attest import Attester
    from trainer.round.node import NodeRunner, NodeSettings
    from trainer.round.overlap import Overlap
    from trainer.round.progress import round_record
    from trainer.round.recovery import Recovery
    from trainer.round.runconfig import ChainConfig, ConfigSource, RunConfig, StaticConfig

    logs = os.environ.get("COLOCO_TEST_NODE_LOGS")
    if logs:  # debugging aid: each node's log in its own file
        import logging

        logging.basicConfig(filename=f"{logs}/node{plan.key}.log", level=logging.INFO,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    time.sleep(plan.start_delay_s)
    if plan.join_after_round:
        _wait_for_round(port, plan.join_after_round)
    key = NodeKey.from_private_key(bytes.fromhex((plan.private_key or DEV_KEYS[plan.key])[2:]))
    domain = Eip712Domain(chain_id=31337, verifying_contract=key.address)
    model = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)
    chain = None
    source: ConfigSource = StaticConfig(
        RunConfig.make(**({"inner_steps": 3, "batch_size": 4} | plan.config))
    )
    if plan.rpc_url and plan.deployment:
        from protocol.chain import ChainClient
        from protocol.deployment import Deployment

        chain = ChainClient(plan.rpc_url, Deployment.load(Path(plan.deployment)))
        source = ChainConfig(chain, batch_size=4)
        domain = chain.attestation_domain()
    settings = NodeSettings(
        run_id=plan.run_id,
        model=model,
        rendezvous_port=port,
        own_endpoint=plan.own_endpoint,
        checkpoint_chunk_bytes=plan.chunk_bytes,
        membership=MembershipConfig(
            min_nodes=plan.min_nodes,
            join_window_s=plan.join_window_s,
            rendezvous_timeout_s=plan.rendezvous_timeout_s,
            no_show_s=plan.no_show_s,
            collective_timeout_s=plan.collective_timeout_s,
            config_wait_s=plan.config_wait_s,
            failover_wait_s=plan.failover_wait_s,
            heartbeat_timeout_s=plan.heartbeat_timeout_s,
        ),
        data_path=data_dir,
        checkpoint_dir=Path(plan.checkpoint_dir) if plan.checkpoint_dir else None,
        max_rounds=plan.rounds,
        leave_after_round=plan.leave_after,
        eval_rows=16,
        overlap=plan.overlap,
        bounded_overlap=plan.bounded_overlap,
        hold_file=Path(plan.hold_file) if plan.hold_file else None,
        time_box=plan.time_box,
        local_ranks=plan.local_ranks,
    )
    if plan.events:
        import logging

        from coloco_cli.node.events import EventsWriter

        logging.getLogger("trainer").setLevel(logging.INFO)
        logging.getLogger("trainer").addHandler(EventsWriter(Path(plan.events)))
    ledger = None
    if plan.ledger_url:
        from trainer.network.ledger_client import LedgerClient

        ledger = LedgerClient(plan.ledger_url)
    recovery = Recovery(plan.run_id, model, 0, chain=chain, peer_timeout_s=60.0, ledger=ledger)
    attester = Attester(key, domain, plan.run_id, ledger)
    deadline = time.monotonic() + 120
    while plan.after_ready is not None and f"ready/{plan.after_ready}" not in results:
        assert time.monotonic() < deadline, f"node {plan.after_ready} never got ready"
        time.sleep(0.05)
    runner = NodeRunner(settings, attester, source, recovery=recovery)
    results[f"ready/{plan.key}"] = True
    if plan.late_first_join and ledger is not None:
        _join_late(runner, ledger, results, plan.key)
    if plan.late_first_round:
        _start_late(runner, port, plan.run_id)
    if plan.late_in_window:
        _join_in_window(runner, port, plan.run_id)
    if plan.serve_corrupt:
        _serve_corrupt(runner.server)
    if plan.forge_in_round is not None:
        from bench.redteam.cheats import ReducerLie, Scheduled

        runner.strategy = Scheduled({plan.forge_in_round: ReducerLie()})
    records: list[dict[str, Any]] = []

    def events() -> None:
        results[f"refusals/{plan.key}"] = [(f.check, f.key) for f in runner.rdv.refusals]
        results[f"failovers/{plan.key}"] = list(runner.rdv.store.failovers)
        results[f"stalled/{plan.key}"] = [(r, list(s)) for r, s in runner.stalled]
        results[f"timeouts/{plan.key}"] = [(r, a, list(m)) for r, a, m in runner.rdv.timeouts]
        results[f"no_shows/{plan.key}"] = list(runner.rdv.no_shows)
        results[f"forged/{plan.key}"] = [(r, list(s)) for r, s in runner.forged]

    def on_step(r: int, info: Any) -> None:
        if plan.step_sleep_s:
            time.sleep(plan.step_sleep_s)
        if plan.die_in_round == r and info.step == 2:
            schedule = runner.schedule
            inflight = schedule.inflight if isinstance(schedule, Overlap) else None
            if plan.die_after_mean and inflight is not None:
                inflight.done.wait(60)  # the peers got their mean: the hash check is what fails
            os._exit(17)  # a crash mid-round: no goodbye, sockets just close
        if plan.stall_in_round == r and info.step == 1:
            os.kill(os.getpid(), signal.SIGSTOP)  # stalled (swapping, preempted): no goodbye
        if plan.diverge_in_round == r and info.step == 1 and runner.diloco is not None:
            runner.diloco.state.base[0] += 1.0  # its round-r result will differ from the rest

    def on_round(report: Any) -> None:
        rec = round_record(report)
        rec["attestation"] = report.signed.attestation.to_json()
        rec["signature"] = "0x" + report.signed.signature.hex()
        rec["groups_formed"] = report.groups_formed
        records.append(rec)
        results[plan.key] = list(records)
        events()

    runner.on_step, runner.on_round = on_step, on_round
    try:
        runner.run()
    except Exception as exc:  # what the node would print: the test reads it
        results[f"error/{plan.key}"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        events()
    results[plan.key] = records


def _join_late(runner: Any, ledger: Any, results: Any, k: int) -> None:
    """This node's first ledger join arrives after that round's join window (a slow start): the
    ledger refuses it (round_started), deterministically, however loaded the machine is. The
    rounds whose join the ledger refused go to ``results["refused/k"]``."""
    honest, first, refused = runner.attester.join, [True], []

    def join(r: int) -> bool:
        if first[0]:
            first[0] = False
            path = f"/v1/runs/0x{RUN_ID.hex()}/rounds/{r}/members"
            deadline = time.monotonic() + 120
            while not ledger.http.get(path).json().get("started"):
                assert time.monotonic() < deadline, f"round {r} never started at the ledger"
                time.sleep(0.05)
        accepted = bool(honest(r))
        if not accepted:
            refused.append(r)
            results[f"refused/{k}"] = list(refused)
        return accepted

    runner.attester.join = join


def _start_late(runner: Any, port: int, run_id: bytes) -> None:
    """A slow start (the demo's late joiner on a quiet machine, still fetching its checkpoint):
    the round the node picks at start-up has its member list opened by the others before the
    node gets to join it, deterministically."""
    honest = runner.first_round

    def first_round() -> int:
        r = int(honest())
        _wait_for_round(port, r, run_id)
        return r

    runner.first_round = first_round


def _join_in_window(runner: Any, port: int, run_id: bytes) -> None:
    """A slow start inside the others' join window: the round the node picks at start-up is
    started once two others posted their joins of it, and the node's ledger join of that round
    lands only once their list opened (its round trip took the rest of their window)."""
    honest_first, honest_join, first = runner.first_round, runner.attester.join, [-1]

    def first_round() -> int:
        first[0] = int(honest_first())
        _wait_for_key(port, f"members/{first[0]}/0/slot/1", run_id)  # both members joined
        return first[0]

    def join(r: int) -> bool:
        if r == first[0]:
            _wait_for_round(port, r, run_id)
        return bool(honest_join(r))

    runner.first_round, runner.attester.join = first_round, join


def _serve_corrupt(server: Any) -> None:
    """Alter the first byte of every chunk this node serves (the manifest it signs stays honest)."""
    honest = server.offer

    def offer(round: int, blob: bytes, digests: bytes, manifest: Any) -> None:
        bad = bytearray(blob)
        for i in range(0, len(bad), manifest.chunk_bytes):
            bad[i] ^= 0xFF
        honest(round, bytes(bad), digests, manifest)

    server.offer = offer


def _wait_for_round(port: int, round: int, run_id: bytes = RUN_ID) -> None:
    _wait_for_key(port, f"members/{round}/0/open", run_id)


def _wait_for_key(port: int, key: str, run_id: bytes = RUN_ID) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    from trainer.network.coordination.store import run_namespace

    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=60)
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if store.check([f"{run_namespace(run_id)}{key}"]):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{key} never appeared in the rendezvous store")


def start_nodes(plans: list[Plan], port: int, data_dir: Path) -> tuple[list[Any], Any, Any]:
    manager = forked.context().Manager()
    results = manager.dict()
    procs = [forked.process(_node_main, (p, port, str(data_dir), results)) for p in plans]
    for p in procs:
        p.start()
    return procs, results, manager


def collect(procs: list[Any], results: Any, manager: Any, timeout: float = 240.0) -> dict[int, Any]:
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join()
    everything = dict(results)
    out = {k: v for k, v in everything.items() if isinstance(k, int)}
    events = {k: v for k, v in everything.items() if isinstance(k, str)}
    codes = [p.exitcode for p in procs]
    manager.shutdown()
    if alive:
        raise TimeoutError(f"{len(alive)} nodes still running after {timeout}s; results {out}")
    refusals = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("refusals/")}
    failovers = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("failovers/")}
    stalled = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("stalled/")}
    timeouts = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("timeouts/")}
    refused = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("refused/")}
    no_shows = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("no_shows/")}
    forged = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("forged/")}
    errors = {int(k.split("/")[1]): v for k, v in events.items() if k.startswith("error/")}
    return {"results": out, "exit_codes": codes, "refusals": refusals, "failovers": failovers,
            "stalled": stalled, "timeouts": timeouts, "refused_joins": refused,
            "no_shows": no_shows, "forged": forged, "errors": errors}  # fmt: skip
