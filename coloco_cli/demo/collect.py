"""Gather the demo's facts from their sources: the chain, the ledger, and the nodes' own records.

Nothing here trusts one source alone: rounds come from the chain (`lastRound`), what each node
was credited from the ledger's verified scores of committed rounds, what each node worked from
its own `round_done` records, and balances from the token contract.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from coloco_cli.rewards.ops import fetch_owed
from protocol.merkle import verify_proof
from protocol.types import Address, Bytes32, RunId

if TYPE_CHECKING:
    from coloco_cli.demo.run import DemoRun

log = logging.getLogger(__name__)

SETTLED = {"committed", "final"}


def ledger_rounds(run: DemoRun) -> list[dict[str, Any]]:
    """The ledger's rounds of the run (oldest first), with every verified score."""
    net = run.require_net()
    rounds = net.ledger_get(f"/v1/runs/0x{run.run_id.hex()}/rounds?limit=500")
    return sorted((r for r in rounds if r["round"] > 0), key=lambda r: r["round"])


def collect(run: DemoRun, wall_s: float) -> dict[str, Any]:
    """The demo report (see `demo_report.REQUIRED_KEYS`)."""
    net = run.require_net()
    chain = net.chain()
    committed = int(chain.last_round(RunId(run.run_id)))
    rounds = ledger_rounds(run)
    records: dict[int, list[dict[str, Any]]] = {}
    for node in run.nodes:
        for rec in node.records():
            records.setdefault(int(rec["round"]), []).append(rec)

    per_round = []
    credited: dict[str, set[int]] = {}
    tokens: dict[str, int] = {}
    for rnd in rounds:
        r = int(rnd["round"])
        scores = rnd.get("scores", [])
        for s in scores:
            if rnd["state"] in SETTLED and s.get("verified") and int(s.get("reward") or 0) > 0:
                credited.setdefault(s["node"].lower(), set()).add(r)
                key = s["node"].lower()
                tokens[key] = tokens.get(key, 0) + int(s.get("verified_tokens") or 0)
        evals = [x["eval_loss"] for x in records.get(r, []) if x.get("eval_loss") is not None]
        per_round.append(
            {
                "round": r,
                "state": rnd["state"],
                "members": len(rnd.get("members", [])),
                "config_version": _one({s["config_version"] for s in scores}),
                "inner_steps": _one({s["inner_steps"] for s in scores}),
                "eval_loss": evals[0] if evals else None,
                "tx_hash": rnd.get("tx_hash"),
            }
        )
    _mark_churn(run, per_round)

    nodes = []
    for node in run.nodes:
        worked = [r for r in node.rounds_worked() if r <= committed]
        first = 1 if node.actor in run.actors[: run.plan.nodes] else (worked or [0])[0]
        last = min(node.leave_after or run.plan.rounds, committed)
        expected = list(range(first, last + 1)) if first else []
        got = sorted(credited.get(node.actor.node_address.lower(), set()))
        owed = fetch_owed(net.ledger_url, node.actor.payout_address)
        balance = int(chain.token_balance(Address(node.actor.payout_address)))
        # the ledger's amount is what the chain committed: its proof opens the on-chain root
        # committed on chain (index > 0), never revoked, and the proof opens it
        root_status = chain.root_status(Bytes32(owed.root))
        in_root = (
            root_status.index > 0
            and not root_status.revoked
            and verify_proof(owed.root, Address(owed.account), owed.cumulative_amount, owed.proof)
        )
        nodes.append(
            {
                "name": node.actor.name,
                "node": node.actor.node_address,
                "payout": node.actor.payout_address,
                "operator": node.actor.operator_address,
                "rounds_worked": len(worked),
                "rounds_expected": len(expected),
                "rounds_worked_list": worked,
                "rounds_credited": got,
                "tokens_verified": tokens.get(node.actor.node_address.lower(), 0),
                "credited_exactly": bool(worked) and got == worked == expected,
                "left_after": node.leave_after,
                "owed": str(owed.cumulative_amount),
                "balance": str(balance),
                "owed_in_committed_root": in_root,
                "balance_equals_owed": balance == owed.cumulative_amount,
            }
        )

    gov = run.gov
    after = gov.config_version_after if gov else run.config_version_start
    seen = gov is not None and any(
        r["config_version"] == after and r["inner_steps"] == gov.inner_steps_after
        for r in per_round
        if r["state"] in SETTLED
    )
    losses = [r["eval_loss"] for r in per_round if r["eval_loss"] is not None]
    return {
        "rounds_committed": committed,
        "run_id": "0x" + run.run_id.hex(),
        "run_name": run.run_name,
        "plan": run.plan.describe(),
        "nodes": nodes,
        "claims": run.claims,
        "tokens_minted": str(int(chain.model_share_token.total_supply())),
        "balances_equal_committed_rewards": all(
            n["balance_equals_owed"] and n["owed_in_committed_root"] for n in nodes
        ),
        "proposal_executed": bool(gov and gov.executed),
        "governance": gov.to_json() if gov else None,
        "config_version_before": gov.config_version_before if gov else run.config_version_start,
        "config_version_after": after,
        "config_change_seen_by_trainers": seen,
        "eval_loss_first": losses[0] if losses else None,
        "eval_loss_last": losses[-1] if losses else None,
        "rounds": per_round,
        "wall_s": round(wall_s, 2),
        "chain_id": net.deployment.chain_id,
        "contracts": dict(net.deployment.contracts),
        "lease": run.lease.outcome if run.lease is not None else None,
    }


def checks(report: dict[str, Any], rounds: int) -> dict[str, bool]:
    """The demo's promises, each true or false (the demo fails if one is false)."""
    first, last = report["eval_loss_first"], report["eval_loss_last"]
    return {
        "every round committed on chain": report["rounds_committed"] == rounds,
        "every node credited exactly the rounds it worked": all(
            n["credited_exactly"] for n in report["nodes"]
        ),
        "balances equal committed cumulative rewards": report["balances_equal_committed_rewards"],
        "tokens minted equal the balances": int(report["tokens_minted"])
        == sum(int(n["balance"]) for n in report["nodes"])
        + int(report.get("tokens_outside_compute", 0)),
        "compute, code and capital all earn; all three vote": all(
            int(v) > 0 for v in (report.get("contributions") or {"-": 0}).values()
        )
        and (report.get("three_kinds_vote") or {}).get("kinds_voting")
        == ["capital", "code", "compute"],
        "backers' ETH paid compute": int(report.get("eth_paid_to_compute") or 0) > 0,
        "the proposal executed through the Timelock": report["proposal_executed"],
        "trainers attested the new config": report["config_change_seen_by_trainers"],
        "eval loss went down": first is not None and last is not None and last < first,
        "the leased node was paid in the settlement; the rest refunded": bool(
            (lease := report.get("lease") or {}).get("paid_in_settlement")
            and lease.get("escrow_accounted")
            and int(lease.get("paid_wei") or 0) > 0
            and int(lease.get("refunded_wei") or 0) > 0
        ),
    }


def _one(values: set[Any]) -> Any:
    """The single value all attestations of a round agree on (None if none, a list if not)."""
    if not values:
        return None
    return next(iter(values)) if len(values) == 1 else sorted(values)


def _mark_churn(run: DemoRun, per_round: list[dict[str, Any]]) -> None:
    by_round = {r["round"]: r for r in per_round}
    for node in run.nodes:
        worked = node.rounds_worked()
        if not worked:
            continue
        if worked[0] > 1 and worked[0] in by_round:
            by_round[worked[0]]["joined"] = f"{node.actor.name} joined"
        if node.leave_after is not None and worked[-1] + 1 in by_round:
            by_round[worked[-1] + 1]["left"] = f"{node.actor.name} left"
