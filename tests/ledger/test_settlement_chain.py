"""Settlement against chain trouble on a real anvil: a commit stuck behind a low fee is replaced
(same nonce) and lands once; a reorg that drops a mined commit sends it again, and a round is
final only once its receipt is at the confirmation depth."""

from __future__ import annotations

import logging
import time

import pytest
from sqlmodel import Session, select

from ledger.core.models import RoundState, Settlement
from tests.ledger.test_settlement import _commit_events, _scored_round


def _row(ledger) -> Settlement:  # type: ignore[no-untyped-def]
    with Session(ledger.engine) as s:
        return s.exec(select(Settlement).where(Settlement.round == 1)).one()


def _round_state(ledger) -> str:  # type: ignore[no-untyped-def]
    with Session(ledger.engine) as s:
        return s.exec(select(RoundState).where(RoundState.round == 1)).one().state


def _tick_until_mined(ledger) -> Settlement:  # type: ignore[no-untyped-def]
    """Tick until the commit's receipt is read: anvil may answer the send before it has mined
    the block, so one tick can leave the row `sent` (seen on a loaded machine)."""
    for _ in range(50):
        ledger.settler.tick()
        row = _row(ledger)
        if row.status == "mined":
            return row
        time.sleep(0.1)
    return row


def test_stuck_commit_is_replaced_and_lands_once(
    client, ledger, started_run, nodes, domain, chain, deployment, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="ledger.chain.settlement")
    _scored_round(client, ledger, started_run, nodes, domain)
    committer = ledger.chain.client.w3.eth
    chain.call("evm_setAutomine", [False])
    try:
        ledger.settler.tick()
        first = _row(ledger)
        assert first.status == "sent"
        # the fee market jumps past the commit's fee cap: mining leaves it in the pool
        chain.call("anvil_setNextBlockBaseFeePerGas", [hex(500 * 10**9)])
        chain.mine(1)
        ledger.settler.tick()
        assert _row(ledger).tx_hash == first.tx_hash  # not stuck long enough yet
        assert _commit_events(chain, deployment, started_run, 1) == 0
        ledger.settler.stuck_after_s = 0.0
        ledger.settler.tick()
        replaced = _row(ledger)
        assert replaced.tx_hash != first.tx_hash and replaced.nonce == first.nonce
        assert "replaced by" in caplog.text
        chain.mine(1)
        ledger.settler.tick()
    finally:
        chain.call("evm_setAutomine", [True])
    done = _row(ledger)
    assert done.status == "mined" and done.tx_hash == replaced.tx_hash
    assert _commit_events(chain, deployment, started_run, 1) == 1
    assert committer.get_transaction_receipt(done.tx_hash)["status"] == 1
    assert committer.get_transaction_count(ledger.chain.client.account_address) == first.nonce + 1


@pytest.mark.parametrize("how", ["anvil_reorg", "evm_revert"])
def test_reorg_drops_a_commit_it_is_sent_again_and_final_only_at_depth(
    how, client, ledger, started_run, nodes, domain, chain, deployment, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="ledger.chain.settlement")
    ledger.settler.confirmations = 3
    _scored_round(client, ledger, started_run, nodes, domain)
    before = chain.snapshot()
    mined = _tick_until_mined(ledger)
    assert mined.status == "mined" and _round_state(ledger) == "committed"
    chain.mine(2)
    ledger.settler.tick()
    assert _row(ledger).status == "mined"  # 2 blocks deep, 3 needed
    # the 3 newest blocks (the commit among them) are replaced by empty ones
    if how == "anvil_reorg":
        chain.call("anvil_reorg", [3, []])
    else:
        chain.revert(before)
        chain.mine(3)
    assert _commit_events(chain, deployment, started_run, 1) == 0
    chain.mine(1)
    ledger.settler.tick()  # depth reached by the numbers, but the receipt is gone
    assert _row(ledger).status in ("signed", "sent", "mined")
    assert _round_state(ledger) != "final"
    assert "left the chain" in caplog.text
    assert _tick_until_mined(ledger).status == "mined"
    assert _commit_events(chain, deployment, started_run, 1) == 1
    chain.mine(3)
    ledger.settler.tick()
    assert _row(ledger).status == "final" and _round_state(ledger) == "final"
    assert _commit_events(chain, deployment, started_run, 1) == 1
