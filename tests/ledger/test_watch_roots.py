"""`coloco watch roots` recomputes every committed root from public data (issue 25, F3): the
ledger's honest commits match; a commit under a made-up run and an ETH root the rewards do not
give are named. The real ledger on anvil, its public API through HTTP."""

from __future__ import annotations

import pytest

from bench.harness.nodes import contract, h, send
from coloco_cli.watch.ops import Scores, check_eth_roots, check_rewards_roots
from tests.ledger.helpers import open_funded_run
from tests.ledger.test_settlement import _scored_round

pytestmark = pytest.mark.anvil


def test_watch_roots_names_made_up_runs_and_wrong_eth_roots(  # type: ignore[no-untyped-def]
    client, ledger, started_run, nodes, domain, chain, deployment
) -> None:
    w3, run = chain.w3, bytes.fromhex(started_run[2:])
    funding = contract(w3, deployment, "RunFunding")
    open_funded_run(chain, deployment, funding, run, open_s=600)
    _scored_round(client, ledger, started_run, nodes, domain)
    assert ledger.settler.drive(started_run, 1).status == "mined"
    ledger.funding.poll_s = 0.0
    ledger.funding.tick()  # the honest ETH root of round 1
    reader = ledger.chain.client
    assert check_rewards_roots(reader, Scores(client)) == []
    assert check_eth_roots(reader, Scores(client)) == []

    # the committer key goes rogue: budget under a made-up run id, and round 2 of the real run
    # (never scored by the ledger) with an ETH root paying the committer
    cl = contract(w3, deployment, "ContributionLedger")
    made_up = bytes.fromhex(h("made-up run")[2:])
    rogue_root = bytes.fromhex(h("rogue root")[2:])
    commit = cl.functions.commitRound(made_up, 0, rogue_root, rogue_root, 1, bytes(32), 10**18)
    send(w3, commit, deployment.committer)
    commit = cl.functions.commitRound(run, 2, bytes(32), rogue_root, 1, bytes(32), 0)
    send(w3, commit, deployment.committer)
    total = funding.functions.runOf(run).call()[6] + 10**16
    send(w3, funding.functions.commitEthRoot(run, 2, rogue_root, total), deployment.committer)

    found = check_rewards_roots(reader, Scores(client))
    assert {(f.kind, f.run_id, f.round) for f in found} == {
        ("unknown_round", "0x" + made_up.hex(), 0),
        ("unknown_round", started_run, 2),
    }
    (eth,) = check_eth_roots(reader, Scores(client))
    assert eth.kind == "eth_root" and eth.round == 2 and eth.committed == "0x" + rogue_root.hex()

    # had the ledger published other rewards for round 1, its committed root and budget differ
    class Doctored(Scores):
        def rewards(self, run_id: str, rnd: int) -> dict[str, int] | None:
            got = super().rewards(run_id, rnd)
            if got and run_id == started_run and rnd == 1:
                return {p: v + 1 for p, v in got.items()}
            return got

    kinds = {(f.kind, f.round) for f in check_rewards_roots(reader, Doctored(client))}
    assert {("rewards_root", 1), ("reward_total", 1)} <= kinds
