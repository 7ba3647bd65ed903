"""Leases through the fault scenarios (bench.faults): each run leases two of its nodes for every
round of the scenario; after the faults the leases must be paid exactly.

``LeaseCheck.open`` escrows the leases (``ComputeLeases.openLease`` from anvil account 7) right
after the run's genesis and waits until the ledger has indexed them; ``verify`` waits until the
run's latest committed root holds each lease's leaf through the window's last round and is
final, compares it with the rounds the ledger verified for the node (``GET /v1/runs/{run}/
rounds/{r}``), claims it on chain (anvil account 8 sends), checks a second claim is refused,
and refunds the rest. Figures: ``lease_unpaid_rounds`` and ``lease_double_paid_rounds`` (paid on
chain against the node's verified rounds), and the check ``leases_paid_exactly``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx
from eth_typing import ChecksumAddress
from web3 import Web3

from bench.fault_rig import LedgerProc, Rig, wait_for
from bench.harness.nodes import contract

log = logging.getLogger("bench.faults")
PRICE = 10**15  # wei per round
LEASED = 2  # nodes leased per run


@dataclass
class LeaseCheck:
    rig: Rig
    url: str
    run: str
    ids: list[str]
    nodes: list[ChecksumAddress]
    rounds: int

    @classmethod
    def open(cls, rig: Rig, led: LedgerProc, run: str, rounds: int) -> LeaseCheck:
        w3 = rig.anvil.w3
        leases = contract(w3, rig.dep, "ComputeLeases")
        ids, nodes = [], []
        for node in rig.nodes[:LEASED]:
            fn = leases.functions.openLease(bytes.fromhex(run[2:]), node.address, PRICE, rounds)
            tx = fn.transact({"from": rig.anvil.accounts[7][0], "value": PRICE * rounds})
            (event,) = leases.events.LeaseOpened().process_receipt(
                w3.eth.wait_for_transaction_receipt(tx)
            )
            assert int(event["args"]["startRound"]) == 1, event["args"]
            ids.append("0x" + bytes(event["args"]["leaseId"]).hex())
            nodes.append(Web3.to_checksum_address(node.address))
        check = cls(rig, led.url, run, ids, nodes, rounds)

        def indexed() -> bool:
            rig.anvil.mine(1)  # automine mines only on transactions: reach the ledger's depth
            return all(httpx.get(f"{led.url}/v1/leases/{i}").status_code == 200 for i in ids)

        if not wait_for(indexed, 60, 0.2):
            raise RuntimeError("the ledger did not index the leases within 60 s")
        return check

    def _leaf(self, lease_id: str) -> dict[str, Any] | None:
        leaf: dict[str, Any] | None = httpx.get(f"{self.url}/v1/leases/{lease_id}").json()["leaf"]
        return leaf

    def _verified_rounds(self, node: str) -> int:
        done = 0
        for r in range(1, self.rounds + 1):
            body = httpx.get(f"{self.url}/v1/runs/{self.run}/rounds/{r}").json()
            done += any(s["node"] == node and s.get("verified") for s in body.get("scores", []))
        return done

    def verify(self) -> dict[str, Any]:
        w3 = self.rig.anvil.w3
        leases = contract(w3, self.rig.dep, "ComputeLeases")
        payer = self.rig.anvil.accounts[8][0]
        unpaid = double = 0
        refused_again = True
        for lease_id, node in zip(self.ids, self.nodes, strict=True):

            def ready(lease_id: str = lease_id) -> bool:
                self.rig.anvil.mine(1)  # the root's dispute window passes by the chain's clock
                leaf = self._leaf(lease_id)
                if not (leaf and leaf["ended"] and leaf["root_state"] == "finalized"):
                    return False
                # the ledger reads "finalized" on its own clock (the later of chain time and
                # the wall clock); after the reorg scenario's revert the chain's clock can lag
                # the wall clock, and a claim mined before the chain reaches claimable_at
                # reverted with RootPending (once in bench.faults --quick): move the chain's
                # clock there first
                lag = int(leaf["claimable_at"] or 0) - int(w3.eth.get_block("latest")["timestamp"])
                if lag > 0:
                    self.rig.anvil.increase_time(lag)  # and mines a block at that time
                return True

            if not wait_for(ready, 120, 0.5):
                raise RuntimeError(f"lease {lease_id}: no final root through its last round")
            leaf = self._leaf(lease_id)
            assert leaf is not None
            args = (
                bytes.fromhex(lease_id[2:]),
                int(leaf["cumulative_wei"]),
                int(leaf["through_round"]),
                bytes.fromhex(leaf["root"][2:]),
                [bytes.fromhex(p[2:]) for p in leaf["proof"]],
            )
            before = w3.eth.get_balance(node)
            if int(leaf["cumulative_wei"]):
                w3.eth.wait_for_transaction_receipt(
                    leases.functions.claim(*args).transact({"from": payer})
                )
                try:
                    leases.functions.claim(*args).call({"from": payer})
                    refused_again = False
                except Exception:  # NothingToClaim: the contract refuses a second payment
                    pass
            w3.eth.wait_for_transaction_receipt(
                leases.functions.refund(*args).transact({"from": payer})
            )
            paid_rounds = (w3.eth.get_balance(node) - before) // PRICE
            expected = self._verified_rounds(node)
            unpaid += max(0, expected - paid_rounds)
            double += max(0, paid_rounds - expected)
            log.info("lease %s: %d rounds paid, %d verified", lease_id, paid_rounds, expected)
        settled = True
        for lease_id in self.ids:
            st = leases.functions.leaseOf(bytes.fromhex(lease_id[2:])).call()
            settled &= bool(st[4]) and int(st[6]) + int(st[7]) == PRICE * self.rounds
        return {
            "lease_unpaid_rounds": unpaid,
            "lease_double_paid_rounds": double,
            "checks": {
                "leases_paid_exactly": unpaid == 0 and double == 0 and refused_again,
                "leases_paid_plus_refunded_is_escrow": settled,
            },
        }
