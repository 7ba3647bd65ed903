"""Capital accrues from final ETH roots only (issue 25, F1), and a revoked latest root stops
counting in the ETH history the settler and the indexed reads rebuild trees from (F5)."""

from __future__ import annotations

import pytest

from bench.harness.nodes import contract
from ledger.chain.funding import fold_history
from tests.ledger.helpers import open_funded_run
from tests.ledger.test_funding_index import _as
from tests.ledger.test_settlement import _scored_round

R1, R2, R3 = "0x" + "01" * 32, "0x" + "02" * 32, "0x" + "03" * 32


def test_history_drops_a_root_revoked_while_latest() -> None:
    """F5: RunFunding uncommits the ETH of a root revoked while it was the run's latest, and the
    next root builds on the one before it; a root revoked under a later one still counts."""
    rolled_back = [
        ("EthRootCommitted", R1, 1, 100),
        ("EthRootCommitted", R2, 2, 250),
        ("EthRootRevoked", R2, 0, 0),
        ("EthRootCommitted", R3, 3, 160),
    ]
    assert fold_history(rolled_back) == [(1, 100), (3, 60)]
    built_upon = [
        ("EthRootCommitted", R1, 1, 100),
        ("EthRootCommitted", R2, 2, 250),
        ("EthRootRevoked", R1, 0, 0),
    ]
    assert fold_history(built_upon) == [(1, 100), (2, 150)]


@pytest.mark.anvil
def test_settler_accrues_capital_only_once_the_eth_root_is_final(  # type: ignore[no-untyped-def]
    client, ledger, started_run, nodes, domain, chain, deployment
) -> None:
    """F1: the ledger's settler mints a round's capital share only after the round's ETH root
    passed its dispute window, and only because the round carried compute budget."""
    w3, run = chain.w3, bytes.fromhex(started_run[2:])
    funding = contract(w3, deployment, "RunFunding")
    cfg = contract(w3, deployment, "TrainingConfig")
    _as(
        chain,
        deployment.address("TimelockController"),
        cfg.functions.setOwnershipSplit(8000, 1000, 1000),
    )
    # a long window, so the test sees the root pending
    setter = funding.functions.setDisputeWindow(600)
    _as(chain, deployment.address("TimelockController"), setter)
    open_funded_run(chain, deployment, funding, run, open_s=3600)
    _scored_round(client, ledger, started_run, nodes, domain)
    assert ledger.settler.drive(started_run, 1).status == "mined"
    ledger.funding.poll_s = 0.0
    ledger.funding.tick()  # the ETH root of round 1, pending for 600 s
    assert funding.functions.runOf(run).call()[2] == 1  # lastRound
    ledger.funding.tick()
    assert funding.functions.runOf(run).call()[8] == 0  # capital pool: nothing while pending
    chain.increase_time(601)
    chain.mine()
    ledger.funding.tick()
    assert funding.functions.runOf(run).call()[8] == 10 * 10**18  # one round's capital share
    token = contract(w3, deployment, "ModelShareToken")
    assert token.functions.balanceOf(funding.address).call() == 10 * 10**18
