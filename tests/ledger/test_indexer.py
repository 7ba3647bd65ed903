"""The chain indexer: follows stake and config events, stores its cursor, survives restarts."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from bench.harness.nodes import ETHER, contract, new_node
from ledger.chain.client import LedgerChain
from ledger.chain.indexer import CURSOR_KEY, Indexer
from ledger.core.models import KeyValue
from ledger.service import Ledger


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_follows_stake_events_and_resumes(ledger: Ledger, chain, deployment, nodes) -> None:
    ledger.prepare_database()
    ledger.start(background=False)
    snap = ledger.indexer.snapshot
    assert all(snap.is_active(n.address) for n in nodes)
    assert snap.config is not None and snap.config.min_stake == ETHER
    assert snap.indexed_block == chain.w3.eth.block_number
    # unstake below the minimum: the node is no longer active once indexed
    sm = contract(chain.w3, deployment, "StakeManager")
    tx = sm.functions.requestUnstake(nodes[0].address, int(1.5 * ETHER)).transact(
        {"from": nodes[0].operator}
    )
    chain.w3.eth.wait_for_transaction_receipt(tx)
    late = new_node(chain.w3, deployment, chain.accounts[6][0])
    assert not ledger.indexer.snapshot.is_active(late.address)
    ledger.indexer.catch_up()
    snap = ledger.indexer.snapshot
    assert not snap.is_active(nodes[0].address)
    assert snap.nodes[nodes[0].address].unbonding == str(int(1.5 * ETHER))
    assert snap.is_active(late.address)
    with Session(ledger.engine) as s:
        cursor = s.get(KeyValue, CURSOR_KEY)
        assert cursor is not None and int(cursor.value) == chain.w3.eth.block_number

    # a restarted indexer (new process, same database) knows everything without re-reading
    fresh = Indexer(ledger.engine, ledger.chain)
    restored = fresh.load()
    assert restored.indexed_block == snap.indexed_block
    assert {a for a in restored.nodes if restored.is_active(a)} == {
        a for a in snap.nodes if snap.is_active(a)
    }
    assert fresh.step() == 0  # nothing new on chain: nothing re-indexed


def test_rpc_down_is_a_clear_error(deployment_file) -> None:
    from protocol.errors import RpcUnavailableError

    dead = LedgerChain("http://127.0.0.1:9", deployment_file, None)
    with pytest.raises(
        RpcUnavailableError, match=r"RPC http://127.0.0.1:9 did not answer eth_blockNumber"
    ):
        dead.block_number()
