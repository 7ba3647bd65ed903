"""The red team's network of real nodes: anvil with the deployed contracts, the ledger (the real
app on SQLite, served over HTTP by uvicorn, its background worker judging, auditing and
committing rounds), a rendezvous store, and one process per node running
:class:`trainer.round.node.NodeRunner` with real gloo all-reduces, signed joins and attestations.

Honest nodes and cheaters run the same code; each cheater is honest except in the rounds it
attacks (:class:`bench.redteam.cheats.Scheduled`). :func:`run` tries the given strategies one
round each (round 1 is honest: every cheater has earlier work of its own to resend), then scores
the run from the ledger's public round views: a strategy is *caught* when its cheater earned at
most 1% of an honest node in the rounds it touched, those rounds were committed, and every honest
node was paid in them; an honest node-round is *penalised* when the node has no paid score.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import torch.distributed as dist
import uvicorn

from bench.harness import forked
from bench.harness.nodes import NodeKey, h, new_node
from bench.redteam.cheats import JumpAhead, SybilPrimary, SybilShared
from bench.redteam.config import ADMIN, NetConfig, configure_chain
from bench.redteam.procs import NodePlan, node_main, node_threads
from ledger.core.config import Settings
from ledger.main import create_app
from ledger.service import Ledger
from protocol.blobs import encode_blob
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess, free_port
from reference.model import GPTConfig
from trainer.round.recovery import genesis_checkpoint

log = logging.getLogger(__name__)

HONEST = 4
CHEATERS = 3
MODEL = "tiny"


@dataclass
class Schedule:
    attacks: dict[int, dict[int, str]]  # cheater index -> {round: strategy}
    touched: dict[str, list[int]]  # strategy -> rounds it touched
    attacker: dict[str, int]  # strategy -> the cheater index whose earnings count
    last_round: int


def schedule(names: list[str], *, cheaters: int = CHEATERS, honest_between: int = 0) -> Schedule:
    """One attack per round from round 2, the cheaters in turn; a final honest round."""
    attacks: dict[int, dict[int, str]] = {i: {} for i in range(cheaters)}
    touched: dict[str, list[int]] = {}
    attacker: dict[str, int] = {}
    r = 2
    for i, name in enumerate(names):
        c = i % cheaters
        attacks[c][r] = name
        attacker[name], touched[name] = c, [r]
        if name == SybilShared.name:  # the next cheater is the pair's first identity
            attacks[(c + 1) % cheaters][r] = SybilPrimary.name
        if name == JumpAhead.name:  # it attested r + 1: judged there; it sits r + 1 out
            attacks[c][r + 1] = name
            touched[name].append(r + 1)
            r += 1
        r += 1 + honest_between
    return Schedule(attacks, touched, attacker, r)


class RealNet:
    def __init__(
        self, anvil: AnvilProcess, dep: Deployment, dep_path: Path, work: Path, cfg: NetConfig
    ) -> None:
        self.anvil, self.dep, self.dep_path, self.work, self.cfg = anvil, dep, dep_path, work, cfg
        self.model = GPTConfig.preset(MODEL)
        self.run_id = h(f"redteam-real-{cfg.seed}-{time.time_ns()}")
        configure_chain(anvil, dep, cfg)
        values: dict[str, Any] = dict(
            environment="test", rpc_url=anvil.rpc_url, deployment=dep_path,
            committer_private_key=anvil.accounts[1][1],
            database_url=f"sqlite:///{work / 'ledger.db'}", blob_dir=work / "blobs",
            admin_token=ADMIN, run_background=True, auto_create_schema=True, confirmations=0,
            indexer_poll_s=0.05, lifecycle_poll_s=0.1, round_deadline_s=60,
            # the nodes answer boundary requests every 2 s: a node that does not within 30 s has
            # withheld them (failed), and the rounds after the audited one stop waiting for it
            boundary_deadline_s=30,
            join_window_s=cfg.join_window_s, tokens_per_step=cfg.batch * self.model.seq_len,
            usefulness_model=MODEL, audit_fraction=cfg.audit_fraction,
            slasher_private_key=cfg.slasher_key,
        )  # fmt: skip
        self.ledger = Ledger(Settings(_env_file=None, **values))  # type: ignore[call-arg]
        self._operator = 0

    @contextmanager
    def running(self) -> Iterator[RealNet]:
        """The ledger served on a free port and the rendezvous store, for the block's length."""
        port = free_port()
        app = create_app(ledger=self.ledger)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.url, timeout=60.0)
        self.store_port = free_port()
        store = dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", self.store_port, is_master=True, wait_for_workers=False,
            timeout=timedelta(seconds=120),
        )  # fmt: skip
        try:
            self._genesis()
            yield self
        finally:
            del store
            self.http.close()
            server.should_exit = True
            thread.join(timeout=30)

    def _genesis(self) -> None:
        ckpt = genesis_checkpoint(self.model, self.cfg.seed)
        resp = self.http.post(
            "/v1/runs",
            json={"run_id": self.run_id, "genesis_checkpoint": "0x" + ckpt.weights_hash.hex()},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert resp.status_code == 201, resp.text
        put = self.http.put(f"/v1/blobs/0x{ckpt.weights_hash.hex()}",
                            content=encode_blob(ckpt.weights))  # fmt: skip
        assert put.status_code in (200, 201, 204), put.text

    def new_key(self) -> NodeKey:
        operator = self.anvil.accounts[2 + self._operator % 8][0]
        self._operator += 1
        return new_node(self.anvil.w3, self.dep, operator)

    def plan(
        self, label: str, key: NodeKey, rounds: int, attacks: dict[int, str], nodes: int
    ) -> NodePlan:
        share = self.work / "sybil"
        share.mkdir(exist_ok=True)
        (self.work / "logs").mkdir(exist_ok=True)
        return NodePlan(
            label=label, private_key="0x" + key.key.hex(), rounds=rounds, attacks=attacks,
            port=self.store_port, rpc_url=self.anvil.rpc_url, deployment=str(self.dep_path),
            ledger_url=self.url, run_id=bytes.fromhex(self.run_id[2:]), share=str(share),
            log_dir=str(self.work / "logs"), min_nodes=nodes, join_window_s=1.0,
        )  # fmt: skip

    def rounds(self) -> dict[int, dict[str, Any]]:
        out = {}
        for r in range(1, 1_000_000):
            resp = self.http.get(f"/v1/runs/{self.run_id}/rounds/{r}")
            if resp.status_code != 200:
                break
            out[r] = resp.json()
        return out

    def wait_settled(self, last: int, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            resp = self.http.get(f"/v1/runs/{self.run_id}/rounds/{last}")
            if resp.status_code == 200 and resp.json().get("state") in ("committed", "final"):
                return
            time.sleep(0.25)
        raise AssertionError(f"round {last} was not settled within {timeout:.0f}s")


def run(net: RealNet, names: list[str], *, honest_between: int = 0,
        timeout: float = 1200.0) -> dict[str, Any]:  # fmt: skip
    """Real honest and cheating nodes try ``names``; the red team's figures (bench.redteam)."""
    cheaters = max(1, min(CHEATERS, len(names) + (SybilShared.name in names)))
    plan = schedule(names, cheaters=cheaters, honest_between=honest_between)
    honest_keys = [net.new_key() for _ in range(HONEST)]
    cheater_keys = [net.new_key() for _ in range(cheaters)]
    net.ledger.indexer.catch_up()
    n = HONEST + cheaters
    plans = [net.plan(f"honest{i}", k, plan.last_round, {}, n) for i, k in enumerate(honest_keys)]
    plans += [
        net.plan(f"cheater{i}", k, plan.last_round, plan.attacks[i], n)
        for i, k in enumerate(cheater_keys)
    ]
    forked.context("bench.redteam.procs")
    procs = [forked.process(node_main, (p,), name=p.label, daemon=True) for p in plans]
    start = time.monotonic()
    for p in procs:
        p.start()
    logs = net.work / "logs"
    deadline = start + timeout
    while not all((logs / f"{p.label}.ready").exists() for p in plans):
        assert time.monotonic() < deadline and all(p.is_alive() for p in procs), "start-up failed"
        time.sleep(0.1)
    (logs / "go").touch()
    start = time.monotonic()
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    failed = [(p.name, p.exitcode) for p in procs if p.exitcode != 0]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert not failed, f"node processes failed: {failed}; logs in {net.work / 'logs'}"
    reports = {p.label: json.loads((logs / f"{p.label}.json").read_text()) for p in plans}
    wall = time.monotonic() - start
    net.wait_settled(plan.last_round)
    views = net.rounds()
    return score(
        net,
        plan,
        views=views,
        reports=reports,
        honest_keys=honest_keys,
        cheater_keys=cheater_keys,
        wall=wall,
    )


def score(net: RealNet, plan: Schedule, *, views: dict[int, dict[str, Any]],
          reports: dict[str, Any], honest_keys: list[NodeKey], cheater_keys: list[NodeKey],
          wall: float) -> dict[str, Any]:  # fmt: skip
    def scores(r: int) -> dict[str, dict[str, Any]]:
        return {s["node"]: s for s in views.get(r, {}).get("scores", [])}

    honest = [k.address for k in honest_keys]
    penalties, honest_rounds = [], 0
    for r in range(1, plan.last_round + 1):
        got = scores(r)
        for i, a in enumerate(honest):
            honest_rounds += 1
            s = got.get(a)
            if s is None or not s["verified"] or int(s["reward"]) == 0:
                why = (s or {}).get("reason") or "no score (did not attest)"
                penalties.append({"node": f"honest{i}", "round": r, "why": why[:400]})
    per: dict[str, Any] = {}
    for name, rounds in plan.touched.items():
        c = plan.attacker[name]
        cheater = cheater_keys[c].address
        earned = sum(int(scores(x).get(cheater, {}).get("reward") or 0) for x in rounds)
        paid = [int(scores(x)[a]["reward"]) for x in rounds for a in honest if a in scores(x)]
        honest_mean = sum(paid) / (HONEST * len(rounds))
        ratio = earned / honest_mean if honest_mean else float("inf")
        committed = all(  # committed on chain (then "final" once its rewards are settled)
            views.get(x, {}).get("state") in ("committed", "final") and views[x]["checkpoint"]
            for x in rounds
        )
        honest_paid = all(scores(x).get(a, {}).get("verified") for x in rounds for a in honest)
        posts = reports.get(f"cheater{c}", {}).get("posts", {})
        why = [
            (scores(x).get(cheater) or {}).get("reason")
            or "ledger answered: " + ",".join(posts.get(str(x), ["nothing posted"]))
            for x in rounds
        ]
        caught = ratio <= 0.01 and committed and honest_paid
        per[name] = {
            "caught": caught,
            "round_caught": rounds[-1] if caught else None,
            "earnings_ratio": round(ratio, 6),
            "why": why[0][:300],
        }
    train_cpu = sum(float(v.get("train_cpu_s", 0.0)) for v in reports.values())
    audit_cpu = net.ledger.keeper.audit_cpu_s
    return {
        "strategies": len(per),
        "caught": sum(1 for v in per.values() if v["caught"]),
        "per_strategy": per,
        "honest_penalised": len(penalties),
        "honest_penalties": penalties,
        "honest_node_rounds": honest_rounds,
        "rounds": plan.last_round,
        "max_cheater_earnings_ratio": max((v["earnings_ratio"] for v in per.values()), default=0),
        "audit_cpu_ratio": round(audit_cpu / max(train_cpu, 1e-9), 4),
        "audit_cpu_s": round(audit_cpu, 2),
        "probe_cpu_s": round(net.ledger.keeper.probe_cpu_s, 2),  # level 2, not in the ratio
        "train_cpu_s": round(train_cpu, 2),
        "nodes_wall_s": round(wall, 1),
        "node_processes": HONEST + len(cheater_keys),
        "node_threads": node_threads(),
        "attackers": {
            name: {"address": cheater_keys[c].address, "payout": cheater_keys[c].payout,
                   "rounds": plan.touched[name]}
            for name, c in plan.attacker.items()
        },
    }  # fmt: skip
