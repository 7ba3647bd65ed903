"""The demo's compute lease, end to end: a node posts an offer, the organiser leases it for the run
(escrow in ETH), the ledger folds the lease into every round's rewards root (no transaction per
round), and after training the node is paid its completed rounds and the unused escrow goes back.

The lease's window is two rounds longer than the run, so the run stops early: the organiser
settles it with `coloco market lease refund --early` through the run's last committed round, in
one transaction. The offer is not backed by a timed challenge (`coloco market challenge`): the
demo's nodes share one machine. Its throughput is set so that the tiny model's attested rate
sits inside the check a leased node passes every round (ledger/judge/throughput.py: between 2%
and 1.5x of the offer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from coloco_cli.demo.actors import Actor
from coloco_cli.demo.net import DemoNet
from coloco_cli.demo.shell import Secret, Shell

PRICE_WEI = 10**15  # per round
EXTRA_ROUNDS = 2  # the window runs past the run: the run stops early
OFFER_FLOPS = "5G"  # per device; the tiny model on a CPU core attests ~1e9 FLOP/s


@dataclass
class DemoLease:
    lease_id: str = ""
    node: str = ""
    rounds: int = 0
    outcome: dict[str, Any] = field(default_factory=dict)


def open_lease(
    shell: Shell, run_id: bytes, actor: Actor, organiser_key: Secret, run_rounds: int
) -> tuple[DemoLease, list[str]]:
    """`actor`'s node posts an offer; the organiser leases it for the run's rounds + 2."""
    offer = shell.json(
        "market", "offer", "--device-kind", "cpu", "--devices", "1", "--memory", "1GiB",
        "--flops", OFFER_FLOPS, "--bandwidth", "1G", "--price", "0.001", "--region", "demo",
        "--keystore", actor.keystore, "--password-file", actor.password_file,
    )  # fmt: skip
    rounds = run_rounds + EXTRA_ROUNDS
    opened = shell.json(
        "market", "lease", "open", "0x" + run_id.hex(), actor.node_address,
        "--price-per-round", f"{PRICE_WEI}wei", "--rounds", str(rounds),
        "--private-key", organiser_key,
    )  # fmt: skip
    lease = DemoLease(str(opened["lease_id"]), actor.node_address, rounds)
    return lease, [
        f"{actor.name} offered its hardware (offer #{offer.get('id', '?')}); the organiser "
        f"leased it for rounds {opened['start_round']}..{opened['end_round']} at "
        f"{PRICE_WEI / 1e18:g} ETH a round (escrow {int(opened['escrow_wei']) / 1e18:g} ETH)"
    ]


def _final_leaf(net: DemoNet, shell: Shell, lease: DemoLease, last: int, timeout: float) -> Any:
    """`market lease status` once the ledger serves the lease's leaf through round `last` in a
    final root (the demo's clock was moved past the dispute windows)."""
    deadline = time.monotonic() + timeout
    while True:
        st = shell.json("market", "lease", "status", lease.lease_id)
        leaf = st.get("leaf") or {}
        if leaf.get("through_round") == last and leaf.get("root_state") == "finalized":
            return st
        if time.monotonic() > deadline:
            return st
        net.mine(1)
        time.sleep(0.5)


def settle_lease(
    net: DemoNet, shell: Shell, lease: DemoLease, organiser_key: Secret, last: int
) -> list[str]:
    """The node's claim and the organiser's early refund; the report's `lease` section."""
    st = _final_leaf(net, shell, lease, last, timeout=60)
    # anyone may send the claim (the ETH goes to the node); the organiser's wallet does here
    paid = shell.json("market", "lease", "claim", lease.lease_id, "--private-key", organiser_key)
    refund = shell.json(
        "market", "lease", "refund", lease.lease_id, "--early", "--private-key", organiser_key
    )
    after = shell.json("market", "lease", "status", lease.lease_id)
    leaf = st.get("leaf") or {}
    lease.outcome = {
        "lease_id": lease.lease_id,
        "node": lease.node,
        "wei_per_round": str(PRICE_WEI),
        "window": [after["start_round"], after["end_round"]],
        "rounds_completed": leaf.get("rounds_completed"),
        "through_round": leaf.get("through_round"),
        "escrow_wei": after["escrow_wei"],
        "paid_wei": after["paid_wei"],
        "refunded_wei": after["refunded_wei"],
        "paid_in_settlement": int(after["paid_wei"]) == int(leaf.get("cumulative_wei") or -1),
        "escrow_accounted": int(after["paid_wei"]) + int(after["refunded_wei"])
        == int(after["escrow_wei"]),
        "claim_tx": paid.get("tx"),
        "refund_tx": refund.get("tx"),
    }
    return [
        f"lease: the node was paid {int(after['paid_wei']) / 1e18:g} ETH for "
        f"{leaf.get('rounds_completed')} completed rounds (from round {last}'s root); the run "
        f"stopped early, so the organiser got {int(after['refunded_wei']) / 1e18:g} ETH back "
        "in one transaction"
    ]
