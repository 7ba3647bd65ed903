"""Recompute every committed root from public data and name each one that differs.

A committer key publishes rewards roots (ContributionLedger) and ETH roots (RunFunding); a bad
one pays nothing while it is pending, and the guardian revokes it then, if someone notices. This
watcher notices: it reads every ``RoundCommitted`` event in chain order and, for each, the round's
public scores from the ledger (``GET /v1/runs/{run}/rounds/{round}``: each attestation's payout
and reward; ``coloco audit`` checks the scores themselves), rebuilds the cumulative rewards tree
and the budget the commit should carry, and compares; then, per funded run, it rebuilds each ETH
root from the run's ETH root events and the same rewards. A commit under a run or round the
ledger does not know (made-up run ids add budget: issue 25, F3) is reported too. A rewards root
that folds in the run's ComputeLeases leaves is rebuilt with them (each lease's price times its
node's verified rounds, from the same public scores and the chain's ``LeaseOpened`` events).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ledger.chain.funding import fold_history
from ledger.judge.rules import split_rewards
from protocol.errors import LedgerError, LedgerUnavailableError
from protocol.merkle import RewardsTree, lease_leaf_hash
from protocol.types import Address, Bytes32

if TYPE_CHECKING:
    from protocol.chain import ChainClient

log = logging.getLogger(__name__)

ZERO = "0x" + "00" * 32


@dataclass(frozen=True)
class Finding:
    """One committed root (or commit) that public data does not reproduce."""

    kind: str  # unknown_round | rewards_root | reward_total | eth_root
    run_id: str
    round: int
    committed: str
    expected: str
    block: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _root(amounts: dict[str, int], extra: list[Bytes32] | None = None) -> str:
    if not amounts and not extra:
        return ZERO
    tree = RewardsTree.build(sorted((Address(a), v) for a, v in amounts.items()), extra or ())
    return "0x" + tree.root.hex()


class Scores:
    """Each (run, round)'s rewards per payout, from the ledger's public rounds API (cached)."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self._rounds: dict[tuple[str, int], dict[str, int] | None] = {}
        self._verified: dict[tuple[str, int], set[str]] = {}

    def rewards(self, run_id: str, rnd: int) -> dict[str, int] | None:
        """Rewards of the round per payout address; None if the ledger does not know it."""
        key = (run_id, rnd)
        if key not in self._rounds:
            self._rounds[key] = self._fetch(run_id, rnd)
        return self._rounds[key]

    def verified(self, run_id: str, rnd: int) -> set[str]:
        """The nodes whose attestation of the round was verified (what a lease pays for)."""
        self.rewards(run_id, rnd)
        return self._verified.get((run_id, rnd), set())

    def _fetch(self, run_id: str, rnd: int) -> dict[str, int] | None:
        try:
            resp = self.http.get(f"/v1/runs/{run_id}/rounds/{rnd}")
        except httpx.HTTPError as exc:
            raise LedgerUnavailableError(
                f"ledger does not answer ({exc.__class__.__name__}): check --ledger-url"
            ) from exc
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise LedgerError(f"ledger answered {resp.status_code} for round {rnd} of {run_id}")
        out: dict[str, int] = {}
        scored = resp.json().get("scores", [])
        self._verified[(run_id, rnd)] = {str(x["node"]) for x in scored if x.get("verified")}
        for score in scored:
            payout, reward = score.get("payout"), int(score.get("reward") or 0)
            if payout and reward > 0:
                out[payout] = out.get(payout, 0) + reward
        return out


def check_rewards_roots(chain: ChainClient, scores: Scores) -> list[Finding]:
    """Every RoundCommitted event against the cumulative tree rebuilt from the ledger's scores."""
    event = chain.contract("ContributionLedger").events.RoundCommitted
    logs = event.get_logs(from_block=chain.deployment.deployment_block)
    leases = _leases_opened(chain)
    amounts: dict[str, int] = {}
    found: list[Finding] = []
    for entry in sorted(logs, key=lambda e: (e["blockNumber"], e["logIndex"])):
        args = entry["args"]
        run_id, rnd = "0x" + bytes(args["runId"]).hex(), int(args["round"])
        committed = "0x" + bytes(args["rewardsRoot"]).hex()
        block = int(entry["blockNumber"])
        rewards = scores.rewards(run_id, rnd)
        if rewards is None:
            found.append(Finding("unknown_round", run_id, rnd, committed, "none", block))
            continue
        before = sum(amounts.values())
        for payout, reward in rewards.items():
            amounts[payout] = amounts.get(payout, 0) + reward
        expected = _root(amounts)
        if committed != expected and committed in _with_leases(leases, scores, amounts, entry):
            expected = committed  # the same amounts, the run's lease leaves folded in
        if committed != expected and not (committed == ZERO and not rewards):
            found.append(Finding("rewards_root", run_id, rnd, committed, expected, block))
        budget = sum(amounts.values()) - before
        if int(args["rewardTotal"]) != budget:
            total = str(int(args["rewardTotal"]))
            found.append(Finding("reward_total", run_id, rnd, total, str(budget), block))
    return found


def _leases_opened(chain: ChainClient) -> list[dict[str, Any]]:
    """Every ``LeaseOpened`` of the deployment's ComputeLeases, in chain order (none without)."""
    if "ComputeLeases" not in chain.deployment.contracts:
        return []
    contract = chain.contract("ComputeLeases")
    logs = contract.events.LeaseOpened().get_logs(from_block=chain.deployment.deployment_block)
    out = []
    for e in sorted(logs, key=lambda e: (e["blockNumber"], e["logIndex"])):
        out.append({**e["args"], "block": int(e["blockNumber"]), "contract": contract.address})
    return out


def _with_leases(
    leases: list[dict[str, Any]], scores: Scores, amounts: dict[str, int], entry: Any
) -> set[str]:
    """The roots a commit may carry with the run's lease leaves (ledger/chain/leases.py): one
    leaf per lease opened before the commit, through its round, paying the price per verified
    round of the window. The ledger knows the leases its indexer reached (a chain-order prefix:
    its confirmation depth), so every prefix is a candidate."""
    args = entry["args"]
    run_id, rnd = "0x" + bytes(args["runId"]).hex(), int(args["round"])
    mine = [x for x in leases if bytes(x["runId"]) == bytes(args["runId"])]
    mine = [x for x in mine if x["block"] < int(entry["blockNumber"])]
    leaves: list[Bytes32] = []
    for x in mine:
        last = min(rnd, int(x["endRound"]))
        done = sum(
            1
            for r in range(int(x["startRound"]), last + 1)
            if str(x["node"]) in scores.verified(run_id, r)
        )
        wei = int(x["weiPerRound"]) * done
        leaves.append(lease_leaf_hash(Address(x["contract"]), bytes(x["leaseId"]), wei, rnd))
    return {_root(amounts, leaves[:k]) for k in range(1, len(leaves) + 1)}


def check_eth_roots(chain: ChainClient, scores: Scores) -> list[Finding]:
    """Every counted ETH root of every funded run against the tree rebuilt from the round's
    rewards (each round's wei split by its compute rewards, as the ledger's settler does)."""
    events = chain.contract("RunFunding").events
    logs = []
    for ev in (events.EthRootCommitted, events.EthRootRevoked):
        logs += ev.get_logs(from_block=chain.deployment.deployment_block)
    by_run: dict[str, list[tuple[str, str, int, int]]] = {}
    blocks: dict[str, int] = {}
    for entry in sorted(logs, key=lambda e: (e["blockNumber"], e["logIndex"])):
        args = entry["args"]
        run_id, root = "0x" + bytes(args["runId"]).hex(), "0x" + bytes(args["root"]).hex()
        total = int(args.get("totalWei", 0))
        by_run.setdefault(run_id, []).append(
            (str(entry["event"]), root, int(args.get("round", 0)), total)
        )
        blocks.setdefault(root, int(entry["blockNumber"]))
    found: list[Finding] = []
    for run_id, run_events in by_run.items():
        for at, (name, root, rnd, _) in enumerate(run_events):
            if name != "EthRootCommitted":
                continue
            # the tree the settler built then: the roots that counted when this one was sent
            amounts: dict[str, int] = {}
            for h_round, wei in fold_history(run_events[: at + 1]):
                rewards = scores.rewards(run_id, h_round) or {}
                payouts = sorted(rewards)
                shares = split_rewards(wei, {k: rewards[p] for k, p in enumerate(payouts)})
                for k, p in enumerate(payouts):
                    if shares[k] > 0:
                        amounts[p] = amounts.get(p, 0) + shares[k]
            expected = _root(amounts)
            if expected != root:
                found.append(Finding("eth_root", run_id, rnd, root, expected, blocks[root]))
    return found
