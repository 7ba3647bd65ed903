"""A joiner fetches a checkpoint peer to peer from two members in other network namespaces,
over rate-limited links, while they train: every byte is on the joiner's eth0 counters and
matches the transfer's model (bench/network_ckpt.py)."""

from __future__ import annotations

import pytest

from bench.harness.netns import unavailable
from bench.network_ckpt import run

REASON = unavailable()
pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}"),
    pytest.mark.slow,  # ~40 s; the quick variant is test_peer_checkpoint.py (loopback sockets)
]


def test_a_checkpoint_fetched_from_two_peers_is_counted_on_the_wire() -> None:
    out = run("tiny", 50.0, 2, chunk=1 << 16)
    size = out["checkpoint_blob_bytes"]
    assert out["checkpoint_chunks"] == -(-size // (1 << 16)) and out["checkpoint_faults"] == 0
    served = out["checkpoint_served_by_peer"]
    assert all(s > 0 for s in served), f"chunks came from one member only: {served}"
    assert sum(served) == size + 32 * out["checkpoint_chunks"]  # each byte fetched once
    rx = out["checkpoint_fetch_rx_bytes"]
    assert size < rx <= 1.10 * size  # the blob plus headers, nothing else
    assert abs(rx - out["checkpoint_fetch_rx_model_bytes"]) <= 0.05 * rx
    assert sum(out["checkpoint_peer_tx_bytes"]) >= size
    assert out["checkpoint_fetch_tx_bytes"] <= 0.05 * size  # requests and ACKs only
    assert all(n > 0 for n in out["checkpoint_peers_trained_steps"]), "the members kept training"
