"""ETH roots and round commits share the committer key: one sender queue, no nonce collision.

A commitRound signed and recorded but not yet sent (a crash between the two, or an RPC outage)
holds its nonce. An ETH root sent then would take that nonce from the pending count, and the
recorded commit would have to be signed again. The funding settler waits instead.
"""

from __future__ import annotations

import pytest
from sqlmodel import Session

from bench.harness.nodes import contract, h
from ledger.core.models import Settlement
from tests.ledger.helpers import open_funded_run
from tests.ledger.test_settlement import _scored_round

pytestmark = pytest.mark.anvil


def _eth_roots(chain, deployment, run_id: str) -> list[dict]:  # type: ignore[no-untyped-def]
    funding = contract(chain.w3, deployment, "RunFunding")
    logs = funding.events.EthRootCommitted().get_logs(from_block=0)
    return [e for e in logs if "0x" + e["args"]["runId"].hex() == run_id]


def test_eth_root_never_takes_a_recorded_commit_nonce(  # type: ignore[no-untyped-def]
    client, ledger, started_run, nodes, domain, chain, deployment
) -> None:
    w3, run = chain.w3, bytes.fromhex(started_run[2:])
    funding = contract(w3, deployment, "RunFunding")
    open_funded_run(chain, deployment, funding, run, open_s=600)
    _scored_round(client, ledger, started_run, nodes, domain)
    one = ledger.settler.drive(started_run, 1)  # round 1 committed: an ETH root to send
    assert one.status == "mined"
    # round 2's commit is signed and recorded, and the process stops before sending it
    nonce = ledger.chain.committer_nonce()
    tx_hash, raw = ledger.chain.sign_commit(
        run_id=run, round_=2, rewards_root=bytes.fromhex(one.rewards_root[2:]),
        checkpoint=bytes.fromhex(h("round-2")[2:]), total_work=1,
        attestations_root=bytes(32), nonce=nonce,
    )  # fmt: skip
    with Session(ledger.engine) as s:
        s.add(Settlement(
            run_id=started_run, round=2, rewards_root=one.rewards_root, checkpoint=h("round-2"),
            total_work="1", attestations_root="0x" + "00" * 32, tree=one.tree, nonce=nonce,
            tx_hash=tx_hash, raw_tx=raw, status="signed",
        ))  # fmt: skip
        s.commit()
    ledger.funding.poll_s = 0.0
    ledger.funding.tick()
    assert _eth_roots(chain, deployment, started_run) == []  # it waits for the commit
    assert ledger.chain.committer_nonce() == nonce  # the recorded nonce is still free
    two = ledger.settler.drive(started_run, 2)  # the recorded commit is sent as it was signed
    assert two.status == "mined" and two.tx_hash == tx_hash and two.nonce == nonce
    ledger.funding.tick()
    (root,) = _eth_roots(chain, deployment, started_run)
    assert root["args"]["round"] == 1  # the round the ledger scored and committed
    sent = w3.eth.get_transaction(root["transactionHash"])
    assert sent["nonce"] == nonce + 1
