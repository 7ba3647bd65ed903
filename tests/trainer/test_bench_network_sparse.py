"""bench.network's sparse figures: the per-node byte model for N nodes and the flat-group limit."""

from __future__ import annotations

from bench.network import wire_model
from bench.network_sparse import largest_flat_group, per_node_model

PACKET, BLOB = 1_006_632, 1_007_000


def test_the_model_for_n_nodes_is_bench_networks_wire_model_at_two() -> None:
    node = {"rounds": [{"allreduce_bytes_sent": PACKET + 8}], "commitment_blob_bytes": BLOB}
    assert abs(per_node_model(2, PACKET, BLOB) - wire_model(node, 2)) <= 66  # one ACK frame
    steps = [per_node_model(n + 1, PACKET, BLOB) - per_node_model(n, PACKET, BLOB)
             for n in range(2, 100)]  # fmt: skip
    assert min(steps) > PACKET and max(steps) - min(steps) < 200  # one packet more per peer


def test_the_flat_group_limit_is_where_the_all_gather_outgrows_the_round() -> None:
    # 1 MB packets at 100 Mbit/s take ~0.084 s each; 25 s of compute at 97 % leaves 0.77 s
    assert largest_flat_group(PACKET, 25.0, 100.0, 0.97) == 10
    assert largest_flat_group(PACKET, 25.0, 10.0, 0.95) == 2
    assert largest_flat_group(PACKET, 0.01, 10.0, 0.95) == 1  # no room: not even one peer
