"""The sparse wire format on real links, for ``bench.network`` (side by side with int8).

Scenarios (nodes in namespaces behind tbf, bench/network_node.py ``--fmt sparse``: the sparse
encoder with each node's error-feedback residual, the checked all-gather of whole packets): 2 nodes
at the rate and at a tenth of it, first **the node's default path** (``--trace --overlap-steps
H/10``: ``DiLoCo.train_local`` as ``coloco node run`` trains, the committed trace of boundary states
hashed, sketched and stored in a background thread, the bounded overlap landing at the first
boundary after step 0): ``utilization_sparse`` and ``utilization_sparse_10mbit`` are its training
thread's CPU in its steps over the round's wall time (``utilization_cpu``: a step the trace's thread
slows is not counted as compute), with the wall-clock figure beside it (``_wall``), and the same
path without writing the boundary states (``utilization_sparse_states_not_stored``: the trace's
hashes and sketches alone). Then, without the trace: lockstep, the one-round delayed outer step
(``--overlap``) and the bounded overlap (``--overlap-steps``; at a tenth of the rate also H/5); and
4 nodes (a few inner steps: the bytes of a round do not depend on them) for the bytes per node as
the group grows. Bytes are each node's ``eth0`` counters. ``bytes_per_node_per_round_by_n`` gives
the measured figures for N = 2 and 4 and the wire model (:func:`per_node_model`, checked against
them) up to N = 100, labelled; and the largest N whose all-gather still hides within the utilization
target at 100 and 10 Mbit/s: above it a hierarchy (groups that all-gather, then exchange group
means) is needed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

MSS = 1448
FRAME_OVERHEAD = 66
HTTP_OVERHEAD = 400
SIZES = (2, 4, 8, 16, 32, 64, 100)

Scenario = Callable[..., list[dict[str, Any]]]
Summary = Callable[..., dict[str, Any]]


def per_node_model(n: int, packet: int, blob: int) -> int:
    """Bytes one node sends a round in a group of ``n``: its packet and 8-byte weight to every
    peer, the 32-byte hash check, its commitment upload, framed in TCP segments, plus the ACKs
    of the ``n - 1`` packets it receives."""
    payload = (n - 1) * (packet + 8 + 32) + blob + HTTP_OVERHEAD
    framed = payload + math.ceil(payload / MSS) * FRAME_OVERHEAD
    acks = math.ceil((n - 1) * packet / (2 * MSS)) * FRAME_OVERHEAD
    return framed + acks


def largest_flat_group(packet: int, compute_s: float, rate_mbit: float, target: float) -> int:
    """The largest N whose all-gather (``n - 1`` packets in at ``rate_mbit``) fits in the
    communication a round may take at utilization ``target``."""
    budget_s = compute_s * (1 - target) / target
    per_packet_s = (packet + math.ceil(packet / MSS) * FRAME_OVERHEAD) * 8 / (rate_mbit * 1e6)
    return 1 + int(budget_s / per_packet_s)


def figures(
    scenario: Scenario,
    summarize: Summary,
    *,
    h: int,
    rate: float,
    others: int,
    sync_per_step: list[float],
) -> dict[str, Any]:
    """Run the sparse scenarios; their JSON keys."""
    auto: list[object] = ["--budget-s", -1]
    tau = max(1, h // 10)
    node = [["--fmt", "sparse", *auto, "--trace", "--overlap-steps", tau]] * 2
    sn = summarize(scenario("sparse, the node's default path", 2, rate, node), h)
    sn10 = summarize(scenario("sparse, the node's default path, a tenth", 2, rate / 10, node,
                              others), h)  # fmt: skip
    # the same without writing the boundary states: the trace's hashes and sketches alone
    unstored = [[*node[0], "--no-store"]] * 2
    sn_nostore = summarize(scenario("sparse, the default path, states not stored", 2, rate,
                                    unstored, others), h)  # fmt: skip
    two = scenario("sparse", 2, rate, [["--fmt", "sparse", *auto]] * 2)
    s2 = summarize(two, h)
    s10 = summarize(
        scenario("sparse at a tenth", 2, rate / 10, [["--fmt", "sparse", *auto]] * 2, others), h
    )
    # with overlap on (issue 27's utilization): the one-round delayed outer step (round r's
    # all-gather during round r+1's compute, --overlap), and the bounded overlap (during round
    # r+1's first tau steps, tau = H/10, the trace interval; at a tenth of the rate also 2 tau)
    overlap = [["--fmt", "sparse", *auto, "--overlap"]] * 2
    so = summarize(scenario("sparse overlap", 2, rate, overlap), h)
    so10 = summarize(scenario("sparse overlap at a tenth", 2, rate / 10, overlap, others), h)

    def bounded(steps: int) -> list[list[object]]:
        return [["--fmt", "sparse", *auto, "--overlap-steps", steps]] * 2

    sb = summarize(scenario(f"sparse, overlap {tau} steps", 2, rate, bounded(tau)), h)
    sb10 = summarize(scenario(f"sparse, overlap {tau} steps, a tenth", 2, rate / 10, bounded(tau),
                              others), h)  # fmt: skip
    sb10_2 = summarize(scenario(f"sparse, overlap {2 * tau} steps, a tenth", 2, rate / 10,
                                bounded(2 * tau), others), h)  # fmt: skip
    four = scenario("sparse, 4 nodes", 4, rate, [["--fmt", "sparse", "--inner-steps", 2]] * 4, 2)
    packet = int(two[0]["packet_bytes"])
    blob = int(two[0]["commitment_blob_bytes"])
    measured = {
        "2": s2["wire_bytes_per_round"],
        "4": round(statistics.mean(n["tx"] / len(n["rounds"]) for n in four)),
    }
    compute_s = s2["step_s"] * h
    return {
        "utilization_sparse": sn["utilization_cpu"],
        "utilization_sparse_10mbit": sn10["utilization_cpu"],
        "utilization_sparse_wall": sn["utilization"],
        "utilization_sparse_10mbit_wall": sn10["utilization"],
        "utilization_sparse_states_not_stored": sn_nostore["utilization_cpu"],
        "utilization_sparse_lockstep": s2["utilization"],
        "utilization_model_sparse_lockstep": s2["utilization_model"],
        "utilization_sparse_lockstep_10mbit": s10["utilization"],
        "utilization_model_sparse_lockstep_10mbit": s10["utilization_model"],
        "utilization_sparse_overlap": so["utilization"],
        "utilization_model_sparse_overlap": so["utilization_model"],
        "utilization_sparse_overlap_10mbit": so10["utilization"],
        "utilization_model_sparse_overlap_10mbit": so10["utilization_model"],
        "overlap_steps": tau,
        "utilization_sparse_bounded": sb["utilization"],
        "utilization_sparse_bounded_10mbit": sb10["utilization"],
        "utilization_sparse_bounded_2tau_10mbit": sb10_2["utilization"],
        "sparse_packet_bytes": packet,
        "sparse_wire_bytes_per_round": s2["wire_bytes_per_round"],
        "sparse_wire_bytes_model_per_round": s2["wire_bytes_model_per_round"],
        "sparse_bytes_ratio_vs_sync_measured": round(
            min(h * sync_per_step[i] / b for i, b in enumerate(s2["wire_bytes_per_round_by_node"])),
            1,
        ),
        "bytes_per_node_per_round_by_n": {
            "measured": measured,
            "modelled": {str(n): per_node_model(n, packet, blob) for n in SIZES},
            "how": "measured: eth0 bytes a node sent per round, N real processes in namespaces "
            "(N=4 with 2 inner steps); modelled: per_node_model (N-1 packets + weights + hash "
            "checks, the commitment upload, TCP framing, ACKs)",
        },
        "sparse_flat_group_limit": {
            f"{mbit:g}mbit": largest_flat_group(packet, compute_s, mbit, target)
            for mbit, target in ((rate, 0.97), (rate / 10, 0.95))
        },
        "sparse_round_compute_s": round(compute_s, 3),
        "sparse_node": sn,
        "sparse_node_10mbit": sn10,
        "sparse_node_states_not_stored": sn_nostore,
        "sparse": s2,
        "sparse_10mbit": s10,
        "sparse_overlap": so,
        "sparse_overlap_10mbit": so10,
        "sparse_bounded": sb,
        "sparse_bounded_10mbit": sb10,
        "sparse_bounded_2tau_10mbit": sb10_2,
        "sparse_4_nodes_results_agree": len({n["final"] for n in four}) == 1,
    }
