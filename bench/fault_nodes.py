"""Real trainer nodes for `bench.faults`' ``ledger_outage`` scenario.

Each node is its own process (forked from :mod:`bench.harness.forked`'s server) running a full
:class:`trainer.round.node.NodeRunner`, the code ``coloco node run`` runs: the rendezvous on a
TCPStore the bench hosts, gloo, the chain's TrainingConfig, signed joins and attestations to the
ledger over HTTP, and its journal in its state folder. Each writes the digests of the
attestations it signed, round by round, to ``<state>/signed.json`` (what the scenario checks
against the ledger's database), and its error, if any, to ``<state>/error.txt``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference.model import GPTConfig

MODEL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)
"""A small model: the scenario is about the ledger, not the training."""


@dataclass(frozen=True)
class NodePlan:
    private_key: str
    state: str  # its checkpoint folder, journal included
    run_id: bytes
    port: int  # the rendezvous TCPStore
    rpc_url: str
    deployment: str
    ledger_url: str
    rounds: int
    min_nodes: int = 2


def node_main(plan: NodePlan) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    import torch

    torch.set_num_threads(1)
    state = Path(plan.state)
    state.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=str(state / "node.log"), level=logging.INFO, force=True,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    from protocol.chain import ChainClient
    from protocol.deployment import Deployment
    from protocol.keys import NodeKey
    from trainer.network.ledger_client import LedgerClient
    from trainer.network.membership import MembershipConfig
    from trainer.round.attest import Attester
    from trainer.round.node import NodeRunner, NodeSettings
    from trainer.round.recovery import Recovery
    from trainer.round.runconfig import ChainConfig

    chain = ChainClient(plan.rpc_url, Deployment.load(Path(plan.deployment)))
    domain = chain.attestation_domain()
    key = NodeKey.from_private_key(bytes.fromhex(plan.private_key[2:]))
    ledger = LedgerClient(plan.ledger_url)
    settings = NodeSettings(
        run_id=plan.run_id, model=MODEL, rendezvous_port=plan.port, checkpoint_dir=state,
        membership=MembershipConfig(min_nodes=plan.min_nodes, join_window_s=1.0,
                                    collective_timeout_s=60.0, rendezvous_timeout_s=600.0),
        max_rounds=plan.rounds, eval_rows=0,
        overlap=False, bounded_overlap=False,  # the faults are placed in lockstep rounds
    )  # fmt: skip
    recovery = Recovery(plan.run_id, MODEL, 0, chain=chain, ledger=ledger, peer_timeout_s=60.0)
    runner = NodeRunner(settings, Attester(key, domain, plan.run_id, ledger),
                        ChainConfig(chain, batch_size=4), recovery=recovery)  # fmt: skip
    signed: list[dict[str, Any]] = []

    def on_round(report: Any) -> None:
        digest = "0x" + report.signed.attestation.digest(domain).hex()
        signed.append({"round": report.round, "digest": digest})
        (state / "signed.json").write_text(json.dumps(signed))

    runner.on_round = on_round
    try:
        runner.run()
    except Exception as exc:
        (state / "error.txt").write_text(f"{type(exc).__name__}: {exc}")
        raise


def signed(state: Path) -> list[dict[str, Any]]:
    """What a node signed: [{round, digest}] in order."""
    path = state / "signed.json"
    return list(json.loads(path.read_text())) if path.is_file() else []
