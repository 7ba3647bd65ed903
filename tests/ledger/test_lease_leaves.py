"""A leased node that leaves is paid exactly for its completed rounds: the lease leaf of every
later root holds the price times the rounds of its window in which its attestation was verified
(ledger.chain.leases), never a round it did not work, a round it failed, or a round outside the
window. (The contract side, the refund of the rest in one transaction, early or at the window's
end: contracts/test/ComputeLeases.t.sol and tests/contracts/test_gas_on_chain.py on anvil.)"""

from __future__ import annotations

import json
from pathlib import Path

from sqlmodel import Session

from bench.harness.nodes import h
from ledger.chain.leases import completed_rounds, lease_leaves, lease_terms
from ledger.core import db
from ledger.core.models import Attestation, FundingEvent

RUN = h("run-lease-leaves")
PRICE = 10**15
NODE, OTHER = "0x" + "aa" * 20, "0x" + "bb" * 20


def _att(node: str, round_: int, verified: bool) -> Attestation:
    return Attestation(run_id=RUN, round=round_, node=node, config_version=1,
                       base_checkpoint=h("b"), pseudo_gradient=h(f"pg{node}{round_}"),
                       data_shard=h("d"), inner_steps=10, tokens=100, result_checkpoint=h("r"),
                       trace_root=h("t"), digest=h(f"dg{node}{round_}"),
                       signature="0x" + "11" * 65, verified=verified)  # fmt: skip


def test_a_node_that_leaves_is_paid_exactly_its_completed_rounds(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    args = {"node": NODE, "organiser": "0x" + "ee" * 20, "weiPerRound": str(PRICE),
            "startRound": 2, "endRound": 6, "escrow": str(5 * PRICE)}  # fmt: skip
    with Session(engine) as s:
        s.add(FundingEvent(contract="ComputeLeases", name="LeaseOpened", run_id=RUN,
                           ref=h("lease"), args=json.dumps(args), block_number=1, block_time=0,
                           log_index=0, tx_hash=h("tx")))  # fmt: skip
        # round 1 is before the window; 2 and 3 worked; 4 failed its checks; it left after 4
        s.add_all([_att(NODE, 1, True), _att(NODE, 2, True), _att(NODE, 3, True),
                   _att(NODE, 4, False)])  # fmt: skip
        s.add_all([_att(OTHER, r, True) for r in range(1, 9)])  # the run goes on without it
        s.commit()
        (lease,) = lease_terms(s, run_id=RUN)
        assert [completed_rounds(s, lease, r) for r in range(1, 9)] == [0, 1, 2, 2, 2, 2, 2, 2]
        for through in (3, 4, 6, 8):  # every later root, to the window's end and past it
            assert lease_leaves(s, RUN, through) == [(h("lease"), 2 * PRICE, through)]
        assert lease_leaves(s, h("another run"), 8) == []
    engine.dispose()
