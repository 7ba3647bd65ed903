"""One red-team node process: a :class:`trainer.round.node.NodeRunner` (the code ``coloco node run``
runs) with a :class:`bench.redteam.cheats.Scheduled` strategy, against the network's anvil,
ledger (HTTP) and rendezvous store. Importable on its own: ``spawn`` starts it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodePlan:
    label: str
    private_key: str  # the node's hot key (registered and staked on chain)
    rounds: int
    attacks: dict[int, str] = field(default_factory=dict)  # round -> strategy name
    port: int = 0  # the rendezvous TCPStore
    rpc_url: str = ""
    deployment: str = ""
    ledger_url: str = ""
    run_id: bytes = b""
    share: str = ""  # the sybil pair's shared folder
    log_dir: str = ""  # its log and its report (<label>.json) go here
    min_nodes: int = 4
    join_window_s: float = 1.0
    threads: int = 0  # torch threads of the node's inner steps; 0: torch's default (every core)
    linger_s: float = 120.0  # after its last round, serve that round's audit (NodeSettings)


def node_threads() -> int:
    """Torch's default intra-op threads on this machine (one a core): what the nodes train on."""
    return os.cpu_count() or 1


def node_main(plan: NodePlan) -> None:
    if plan.threads:
        os.environ["OMP_NUM_THREADS"] = str(plan.threads)
    else:
        os.environ.pop("OMP_NUM_THREADS", None)  # torch's default: one thread a core
    import json
    import logging
    import time
    from pathlib import Path

    import torch

    torch.set_num_threads(plan.threads or node_threads())
    fmt = "%(asctime)s %(name)s %(levelname)s %(message)s"
    logging.basicConfig(filename=f"{plan.log_dir}/{plan.label}.log", level=logging.INFO,
                        format=fmt, force=True)  # fmt: skip
    from bench.redteam.cheats import Scheduled, make
    from protocol.chain import ChainClient
    from protocol.deployment import Deployment
    from protocol.keys import NodeKey
    from reference.data import Corpus
    from reference.model import GPTConfig
    from trainer.network.ledger_client import LedgerClient
    from trainer.network.membership import MembershipConfig
    from trainer.round.attest import Attester
    from trainer.round.node import NodeRunner, NodeSettings
    from trainer.round.recovery import Recovery
    from trainer.round.runconfig import ChainConfig

    chain = ChainClient(plan.rpc_url, Deployment.load(Path(plan.deployment)))
    model = GPTConfig.preset("tiny")
    key = NodeKey.from_private_key(bytes.fromhex(plan.private_key[2:]))
    lc = LedgerClient(plan.ledger_url, timeout_s=60.0)
    made: dict[str, Any] = {}  # one instance per strategy (jump_ahead spans two rounds)
    strategy = Scheduled(
        {r: made.setdefault(n, make(n, Path(plan.share))) for r, n in plan.attacks.items()}
    )
    settings = NodeSettings(
        run_id=plan.run_id, model=model, rendezvous_port=plan.port,
        membership=MembershipConfig(
            min_nodes=plan.min_nodes, join_window_s=plan.join_window_s,
            rendezvous_timeout_s=60.0, collective_timeout_s=180.0, config_wait_s=30.0,
            heartbeat_timeout_s=30.0,
        ),
        max_rounds=plan.rounds, eval_rows=0,
        bounded_overlap=False,  # the cheats are placed and checked in lockstep rounds
        checkpoint_dir=Path(plan.log_dir) / plan.label,  # its boundary states, for the audit
        audit_linger_s=plan.linger_s,
        overlap=False,  # the cheats' strategies and the scenario's round timing are lockstep's
    )  # fmt: skip
    runner = NodeRunner(
        settings,
        Attester(key, chain.attestation_domain(), plan.run_id, lc),
        ChainConfig(chain, batch_size=4),
        corpus=Corpus.stdlib(),
        recovery=Recovery(plan.run_id, model, 0, chain=chain, ledger=lc, peer_timeout_s=180.0),
        strategy=strategy,
    )
    worked: list[int] = []
    out = Path(plan.log_dir) / f"{plan.label}.json"

    def save(**extra: Any) -> None:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(strategy.report() | {"worked": worked} | extra))
        tmp.rename(out)

    def on_round(report: Any) -> None:
        worked.append(report.round)
        save()

    runner.on_round = on_round
    (Path(plan.log_dir) / f"{plan.label}.ready").touch()  # warm: imports done, keys loaded
    gate = Path(plan.log_dir) / "go"
    while not gate.exists():  # every node starts round 1 at once (no node misses it)
        time.sleep(0.05)
    try:
        runner.run()
    finally:
        save(done=True)
