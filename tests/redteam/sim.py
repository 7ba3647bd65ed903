"""The in-process red-team network's driver (``tests/redteam/network.py``): ledger-level tests of
the slash path and of the usefulness/audit interplay, in one process and without the trainer's
collective. The red team proper runs real nodes (``bench/redteam/realnet.py``,
``python -m bench.redteam``).

Round 1 is a warm-up (honest nodes, plus the cheaters that need an earlier round of their own);
then each strategy gets a round with a fresh cheating node.
"""

from __future__ import annotations

import logging
from typing import Any

from tests.redteam.network import Network
from tests.redteam.node import Node
from tests.redteam.strategies import ALL, JumpAhead, SimStrategy, SybilShared

log = logging.getLogger(__name__)
HONEST = 4


def run(net: Network, *, extra_honest_rounds: int, only: list[str] | None = None) -> dict[str, Any]:
    honest = [net.add_node(label=f"honest{i}") for i in range(HONEST)]
    plans: list[tuple[SimStrategy, list[Node]]] = []
    for cls in ALL:
        if only and cls.name not in only:
            continue
        strategy = cls()
        cheater = net.add_node(strategy, label=strategy.name)
        crew = [cheater]
        if isinstance(strategy, SybilShared):
            primary = net.add_node(label="sybil_primary")
            strategy.primary = primary.address
            crew = [primary, cheater]
        plans.append((strategy, crew))
    warm = [c for s, crew in plans if getattr(s, "warmup", False) for c in crew]
    r = 1
    real = {c.address: c.strategy for c in warm}
    for c in warm:  # an honest first round: something of its own to resend later
        c.strategy = SimStrategy()
    net.play_round(r, honest + warm)
    for c in warm:
        c.strategy = real[c.address]
    touched: dict[str, list[int]] = {}
    for strategy, crew in plans:
        r += 1
        net.play_round(r, honest + crew)
        touched[strategy.name] = [r]
        if isinstance(strategy, JumpAhead):  # it attested r + 1: judged there
            r += 1
            net.play_round(r, honest)
            touched[strategy.name].append(r)
        for _ in range(extra_honest_rounds):
            r += 1
            net.play_round(r, honest)
    honest_addr = {n.address for n in honest}
    penalties: list[dict[str, Any]] = []
    honest_rounds = 0
    for rl in net.logs.values():
        for node in honest:
            s = rl.scores.get(node.address)
            honest_rounds += 1
            if s is None or not s["verified"] or int(s["reward"]) == 0:
                why = (s or {}).get("reason") or ",".join(rl.posts.get(node.address, ["no post"]))
                joined = node.joins.get(rl.round)
                penalties.append(
                    {"node": node.label, "round": rl.round, "join": joined, "why": why[:400]}
                )
                log.warning("honest %s penalised in round %d: %s", node.label, rl.round, s)
    per: dict[str, Any] = {}
    for strategy, crew in plans:
        cheater = crew[-1]
        rounds = touched[strategy.name]
        earned = sum(
            int(net.logs[x].scores.get(cheater.address, {}).get("reward") or 0) for x in rounds
        )
        honest_mean = sum(
            int(net.logs[x].scores[a]["reward"])
            for x in rounds
            for a in honest_addr
            if a in net.logs[x].scores
        ) / (HONEST * len(rounds))
        ratio = earned / honest_mean if honest_mean else float("inf")
        committed = all(net.logs[x].state == "committed" for x in rounds)
        honest_paid = all(
            net.logs[x].scores.get(a, {}).get("verified") for x in rounds for a in honest_addr
        )
        why = [
            (net.logs[x].scores.get(cheater.address) or {}).get("reason")
            or ",".join(net.logs[x].posts.get(cheater.address, ["did not post"]))
            for x in rounds
        ]
        caught = ratio <= 0.01 and committed and honest_paid
        per[strategy.name] = {
            "caught": caught,
            "round_caught": rounds[-1] if caught else None,
            "earnings_ratio": round(ratio, 6),
            "why": why[-1][:300] if why else "",
        }
    train_cpu = sum(n.train_cpu_s for n in net.nodes)
    return {
        "strategies": len(per),
        "caught": sum(1 for v in per.values() if v["caught"]),
        "per_strategy": per,
        "honest_penalised": len(penalties),
        "honest_penalties": penalties,
        "honest_node_rounds": honest_rounds,
        "rounds": r,
        "max_cheater_earnings_ratio": max((v["earnings_ratio"] for v in per.values()), default=0),
        "audit_cpu_ratio": round(net.ledger.keeper.audit_cpu_s / max(train_cpu, 1e-9), 4),
        "audit_cpu_s": round(net.ledger.keeper.audit_cpu_s, 2),
        "train_cpu_s": round(train_cpu, 2),
    }
