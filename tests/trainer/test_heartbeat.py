"""Heartbeats and their reader over a real TCPStore with real node keys: a beating node is alive,
a silent one is stalled after the timeout, a replayed or forged heartbeat does not revive it, and a
reader that was itself not scheduled does not blame its peers for its own silence."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from protocol.coordination import Kind
from trainer.network.coordination.board import Board
from trainer.network.coordination.heartbeat import Heartbeat, Liveness, StalledError, heartbeat_key
from trainer.network.coordination.store import FailoverStore

TIMEOUT_S = 1.0


def _wait_stalled(live: Liveness, who: tuple[str, ...], limit_s: float) -> tuple[str, ...]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = live.stalled(who)
        if found:
            return found
        time.sleep(0.05)
    return ()


def test_a_beating_node_is_alive_and_a_silent_one_is_stalled(
    store: FailoverStore, board_of: Callable[[int], Board]
) -> None:
    node, reader = board_of(0x41), board_of(0x42)
    beat = Heartbeat(node, lambda: store.endpoint, interval_s=0.1)
    live = Liveness(reader, TIMEOUT_S)
    who = (node.address,)
    beat.start()
    try:
        live.reset(who)
        assert _wait_stalled(live, who, 3 * TIMEOUT_S) == (), "alive while it beats"
    finally:
        beat.stop()
    silent_from = time.monotonic()
    assert _wait_stalled(live, who, 5 * TIMEOUT_S) == who
    assert time.monotonic() - silent_from >= TIMEOUT_S * 0.9
    with pytest.raises(StalledError, match="no heartbeat from"):
        live.check(who)


def test_replayed_and_forged_heartbeats_do_not_revive_a_silent_node(
    store: FailoverStore, board_of: Callable[[int], Board]
) -> None:
    node, reader, rogue = board_of(0x43), board_of(0x44), board_of(0x45)
    beat = Heartbeat(node, lambda: store.endpoint, interval_s=0.1)
    for _ in range(3):
        beat.beat()
    key = heartbeat_key(node.address)
    replay = store.get(key)
    live = Liveness(reader, TIMEOUT_S)
    who = (node.address,)
    live.reset(who)
    live.poll(who)  # sees seq 3
    forged = [rogue.sign(Kind.HEARTBEAT, 0, 0, {"seq": 10**9}).to_wire(), replay]
    deadline = time.monotonic() + 4 * TIMEOUT_S
    found: tuple[str, ...] = ()
    while not found and time.monotonic() < deadline:
        for value in forged:
            store.set(key, value)
            found = live.stalled(who)
            time.sleep(0.1)
    assert found == who, "a replay (seq not higher) or a rogue's heartbeat kept it alive"
    assert "wrong_signer" in {r.check for r in reader.refusals if r.key == key}


def test_a_reader_that_was_not_scheduled_does_not_blame_its_peers(
    store: FailoverStore, board_of: Callable[[int], Board]
) -> None:
    node, reader = board_of(0x46), board_of(0x47)
    beat = Heartbeat(node, lambda: store.endpoint)
    live = Liveness(reader, TIMEOUT_S)
    who = (node.address,)
    beat.beat()
    live.reset(who)
    live.poll(who)
    time.sleep(2 * TIMEOUT_S)  # the whole machine stalled: the reader did not poll, nobody beat
    assert live.stalled(who) == (), "the reader blamed its peer for its own silence"
    beat.beat()  # the peer resumes
    assert live.stalled(who) == ()
    time.sleep(0.3)
    assert _wait_stalled(live, who, 3 * TIMEOUT_S) == who, "then silent for good: stalled"


def test_a_restarted_node_cannot_read_as_stalled_to_old_or_new_peers(
    store: FailoverStore, board_of: Callable[[int], Board]
) -> None:
    """F16: ``seq`` restarted at 0 in every process and counted only when higher than the
    highest seen, so after a restart a peer that had seen seq 40 dropped the node until the new
    process counted past 40 (about as long as it had been up); and a replay of one old high-seq
    beat did the same to a peer that had never seen the node. Each process now signs a session
    nonce beside its counter."""
    node, old_peer, new_peer = board_of(0x48), board_of(0x49), board_of(0x4A)
    who = (node.address,)
    first = Heartbeat(node, lambda: store.endpoint)
    for _ in range(40):  # the node was up a while
        first.beat()
    old_beat = store.get(heartbeat_key(node.address))
    old = Liveness(old_peer, TIMEOUT_S)
    old.reset(who)
    old.poll(who)
    restarted = Heartbeat(node, lambda: store.endpoint, interval_s=0.1)  # a new process: seq 0
    store.set(heartbeat_key(node.address), old_beat)  # a rogue replays the old high-seq beat
    new = Liveness(new_peer, TIMEOUT_S)
    new.reset(who)
    new.poll(who)  # the new peer's first read is the replay
    restarted.start()
    try:
        assert _wait_stalled(old, who, 3 * TIMEOUT_S) == (), "an old peer dropped the restart"
        assert _wait_stalled(new, who, 3 * TIMEOUT_S) == (), "a replay made a new peer drop it"
    finally:
        restarted.stop()
    last_beat = store.get(heartbeat_key(node.address))
    deadline = time.monotonic() + 5 * TIMEOUT_S
    found: tuple[str, ...] = ()
    while not found and time.monotonic() < deadline:  # dead now: replays of its beats, of
        for value in (old_beat, last_beat):  # either session, in turn, revive nothing
            store.set(heartbeat_key(node.address), value)
            found = old.stalled(who)
            time.sleep(0.1)
    assert found == who, "alternating replays of two sessions kept a dead node alive"
