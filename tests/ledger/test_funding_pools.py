"""ETH allocation of funded rounds and the compute share of the split (real SQLite, anvil)."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from ledger.chain.client import LedgerChain
from ledger.chain.funding import eth_amounts
from ledger.chain.pools import compute_reward, ownership_split
from ledger.core import db
from ledger.core.models import Attestation
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from tests.ledger.helpers import governance_sets

RUN = "0x" + "ab" * 32
A = "0x" + "11" * 20
B = "0x" + "22" * 20


def _att(i: int, rnd: int, payout: str, reward: int) -> Attestation:
    h = "0x" + f"{i:064x}"
    return Attestation(
        run_id=RUN, round=rnd, node="0x" + f"{i:040x}", config_version=1, base_checkpoint=h,
        pseudo_gradient=h, data_shard=h, inner_steps=1, tokens=1, result_checkpoint=h,
        trace_root=h, digest=h, signature="0x", payout=payout, reward=str(reward),
    )  # fmt: skip


def test_eth_split_follows_each_rounds_rewards_and_is_reproducible(sqlite_url: str) -> None:
    engine = db.make_engine(sqlite_url)
    db.create_all(engine)
    with Session(engine) as s:
        s.add_all([_att(1, 1, A, 30), _att(2, 1, B, 10), _att(3, 2, B, 50)])
        s.commit()
        first = eth_amounts(s, RUN, [(1, 1000)])
        both = eth_amounts(s, RUN, [(1, 1000), (2, 7)])
    assert first == {A: 750, B: 250}
    assert both == {A: 750, B: 257}  # round 2 paid only B, which worked alone
    assert all(both[k] >= first[k] for k in first)  # cumulative: never decreases


@pytest.mark.anvil
def test_compute_takes_its_share_of_the_split(deployment: Deployment, chain: AnvilProcess) -> None:
    governance_sets(chain, deployment, "setOwnershipSplit", 8000, 1500, 500)
    key = next(k for a, k in chain.accounts if a == deployment.committer)
    lc = LedgerChain(chain.rpc_url, deployment, key)
    assert ownership_split(lc) == (8000, 1500, 500)
    assert compute_reward(lc, 100 * 10**18) == 80 * 10**18
