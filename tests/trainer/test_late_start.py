"""A node that comes to a round after its member list opened sits it out, and still waits for
that list's members in the next round.

Real TCPStore, real signed joins and round-opens. The late node reads round 1's list opened
without it (``Rendezvous.opened_without_me``) and skips the round before any join (a ledger
would otherwise count it a member of a round it never had: docs/trainer.md, "With a ledger").
The list it skipped must count as the last one it saw: with ``min_nodes`` 1 and the
``current_round`` hint unreadable (a rogue overwrote it: ``test_rogue_cannot_move_current_round``),
a node that knew of no list expected only itself and opened round 2 alone, and the members,
finding round 2 opened without them, sat it out.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from protocol.keys import NodeKey
from trainer.network.coordination.registry import StaticRegistry
from trainer.network.membership import Members, MembershipConfig, Rendezvous
from trainer.round.node import offline_domain

RUN = bytes.fromhex("ae" * 32)


def _nodes(port: int, extra: int = 0) -> list[Rendezvous]:
    """Two members (``min_nodes`` 2), a late node (``min_nodes`` 1), and ``extra`` more
    registered nodes (``min_nodes`` 1)."""
    keys = [NodeKey.from_private_key(bytes([0x61 + i]) * 32) for i in range(3 + extra)]
    registry = StaticRegistry({str(k.address) for k in keys})
    domain = offline_domain(RUN)
    cfgs = [MembershipConfig(min_nodes=2, join_window_s=0.0, rendezvous_timeout_s=20.0)] * 2
    cfgs += [MembershipConfig(min_nodes=1, join_window_s=0.0, rendezvous_timeout_s=20.0)] * (
        1 + extra
    )
    return [Rendezvous("127.0.0.1", port, key=k, domain=domain, run_id=RUN, registry=registry,
                       cfg=c) for k, c in zip(keys, cfgs, strict=True)]  # fmt: skip


def _join_all(nodes: list[Rendezvous], round: int, first: int | None = None) -> dict[int, Members]:
    """Every node joins ``round`` (in threads); node ``first`` 0.5 s before the others."""
    got: dict[int, Members] = {}
    errors: list[BaseException] = []

    def join(i: int) -> None:
        try:
            got[i] = nodes[i].join(round)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=join, args=(i,)) for i in range(len(nodes))]
    if first is not None:
        threads[first].start()
        time.sleep(0.5)
    for t in threads:
        if t.ident is None:
            t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return got


def test_a_late_node_skips_an_opened_round_and_waits_for_its_members_next(
    store_port: int,
) -> None:
    a, b, late = nodes = _nodes(store_port)
    first = _join_all([a, b], 1)
    assert set(first[0].addresses) == {a.address, b.address}
    assert late.opened_without_me(1) == first[0], "round 1 opened without the late node"
    assert a.opened_without_me(1) is None, "a member is in round 1's list"
    assert late.opened_without_me(2) is None, "round 2 has not opened"
    late.store.set("current_round", "a value a rogue left: unreadable")
    second = _join_all(nodes, 2, first=2)  # the late node first: it waits for the others
    lists: set[Any] = {m.addresses for m in second.values()}
    assert lists == {tuple(sorted(n.address for n in nodes))}, lists


def test_a_round_most_of_the_last_members_joined_is_forming_without_a_newcomer(
    store_port: int,
) -> None:
    """``forming_without_me``: a newcomer to a run under way does not join a round most of the
    last list's members have joined (with a ledger its join could be counted after their list
    opened: a no-show). A registered node outside the last list, or a minority of it, posting
    joins of future rounds cannot keep newcomers out; members of the last list and the run's
    first round are never affected."""
    a, b, late, rogue = _nodes(store_port, extra=1)
    assert not late.forming_without_me(1), "the run's first round: nobody is late"
    _join_all([a, b], 1)
    assert not late.forming_without_me(2), "nobody joined round 2 yet"
    rogue._post_join(2, 0)  # a registered node, no member of round 1
    assert not late.forming_without_me(2), "a non-member's join does not count"
    a._post_join(2, 0)
    assert not late.forming_without_me(2), "half of round 1's members is no majority"
    b._post_join(2, 0)
    assert late.forming_without_me(2), "both of round 1's members joined round 2"
    assert not a.forming_without_me(2) and not b.forming_without_me(2), "members are awaited"
