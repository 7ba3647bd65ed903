"""DiLoCo across real links: nodes in network namespaces, bytes and utilization on the wire.

    python -m bench.network [--quick] [--rounds R] [--inner-steps H] [--rate-mbit 100]

Each node is a process in its own network namespace (bench/harness/netns.py) behind a
``tbf rate 100mbit`` link both ways; the rendezvous store and the ledger's blob intake live in a
hub namespace (bench/network_hub.py). Nodes run bench/network_node.py: the real trainer pieces
(rendezvous, a gloo group kept across rounds, time-boxed inner AdamW on the ``cpu10m`` preset of
10.7M parameters, the fused subtract-and-quantize kernel, the token-weighted quantized all-reduce,
the bit-exact outer step, the weights hash check, the commitment upload). Bytes are the node's
``eth0`` counters: every byte it sends, TCP/IP/Ethernet headers included.

Scenarios: int8 and fp32 at the rate, int8 at a tenth of it, the sparse format at both and with
4 nodes (bench/network_sparse.py: ``sparse_*`` keys, ``bytes_per_node_per_round_by_n``),
synchronous data parallel (gradient all-reduce every step, measured for a few steps), a node 3x
slower with the time box, a joiner fetching the preset's checkpoint peer to peer from 2 members
that keep training
(bench/network_ckpt.py: ``checkpoint_*`` keys), and the overlap option's loss cost (one-round
delayed outer step, ``--overlap`` on the nodes' real path, tiny model, 8 rounds; the full run
adds bench.diloco's simulation as ``*_simulated``). Timing figures skip round 1 (group set-up,
allocator warm-up). Utilization per node is inner-compute seconds over wall seconds per round;
beside it the model U = H*T / (H*T + C) with T (s per inner step) and C (s of communication per
round) measured.
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import emit, network_ckpt, network_sparse
from bench.harness.netns import Netns, unavailable
from trainer.round.runconfig import INNER_LR, NODE_BATCH_SIZE, OUTER_LR, OUTER_MOMENTUM

log = logging.getLogger("bench.network")
REPO = Path(__file__).resolve().parents[1]
MSS = 1448  # TCP payload per 1500-byte frame with timestamps
FRAME_OVERHEAD = 66  # Ethernet 14 + IP 20 + TCP 20 + timestamps 12
HTTP_OVERHEAD = 400  # request line, headers and the JSON answer's ACKs, per upload (model)


def _py(module: str, *args: object) -> list[str]:
    return [sys.executable, "-m", module, *(str(a) for a in args)]


def run_nodes(
    n: int,
    rate_mbit: float,
    node_args: list[list[object]],
    *,
    timeout_s: float = 900.0,
) -> list[dict[str, Any]]:
    """Start a hub and ``n`` nodes in namespaces; return each node's JSON record."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out_dir = Path(tempfile.mkdtemp(prefix="bench-network-"))
    with Netns(n, rate_mbit, prefix=f"cb{os.getpid() % 100000}") as net:
        hub = subprocess.Popen(
            [*net.argv(None), *_py("bench.network_hub", "--port", 29600, "--ledger-port", 8600)],
            env=env, cwd=REPO, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs: list[subprocess.Popen[bytes]] = []
        try:
            assert hub.stdout is not None
            if hub.stdout.readline().strip() != "hub ready":
                raise RuntimeError("the hub did not start")
            for i in range(n):
                cmd = _py("bench.network_node", "--index", i, "--world", n, "--hub", net.hub_ip,
                          "--port", 29600, "--ledger-port", 8600, "--out", out_dir / f"{i}.json",
                          "--work-dir", out_dir / f"work-{i}", *node_args[i])  # fmt: skip
                procs.append(subprocess.Popen([*net.argv(i), *cmd], env=env, cwd=REPO))
            deadline = time.monotonic() + timeout_s
            for proc in procs:
                rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                if rc != 0:
                    raise RuntimeError(f"a node exited with {rc}")
        finally:
            children: list[subprocess.Popen[Any]] = [*procs, hub]
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    results = [json.loads((out_dir / f"{i}.json").read_text()) for i in range(n)]
    shutil.rmtree(out_dir, ignore_errors=True)  # (--trace: the boundary states, ~1.4 GB a node)
    return results


def _later(node: dict[str, Any]) -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = node["rounds"]
    return rounds[1:] if len(rounds) > 1 else rounds


def wire_model(node: dict[str, Any], world: int) -> float:
    """Bytes per round a node should send by the formula: the all-reduce's payload, the hash
    check, the commitment upload, each framed in 1448-byte TCP segments, plus the ACKs for what
    it receives (one 66-byte frame per two segments)."""
    rounds = node["rounds"]  # (with --overlap round r's bytes are in round r+1's record)
    sent = (sum(r["allreduce_bytes_sent"] for r in rounds) + node.get("allreduce_bytes_after_loop",
            0)) / len(rounds)  # fmt: skip
    payload = sent + 32 * (world - 1) + node["commitment_blob_bytes"] + HTTP_OVERHEAD
    framed = payload + math.ceil(payload / MSS) * FRAME_OVERHEAD
    acks = math.ceil(sent / (2 * MSS)) * FRAME_OVERHEAD
    return float(framed + acks)


def summarize(
    nodes: list[dict[str, Any]], h: int, *, fast: list[int] | None = None
) -> dict[str, Any]:
    fast = list(range(len(nodes))) if fast is None else fast
    later = [r for i in fast for r in _later(nodes[i])]
    util = statistics.mean(r["compute_s"] / r["wall_s"] for r in later)
    # the training thread's CPU in its steps over the round's wall time: what the wall-clock
    # figure cannot see, a step slowed by the node's own background work (the trace's hashes)
    util_cpu = statistics.mean(r.get("compute_cpu_s", r["compute_s"]) / r["wall_s"] for r in later)
    t = statistics.mean(r["step_s"] for r in later)
    c = statistics.mean(r["wall_s"] - r["compute_s"] for r in later)
    world = len(nodes)
    per_round = [node["tx"] / len(node["rounds"]) for node in nodes]
    return {
        "utilization": round(util, 4),
        "utilization_cpu": round(util_cpu, 4),
        "utilization_model": round(h * t / (h * t + c), 4),
        "step_s": round(t, 4),
        "comm_s": round(c, 3),
        "round_wall_s": round(statistics.mean(r["wall_s"] for r in later), 3),
        "wire_bytes_per_round": round(statistics.mean(per_round)),
        "wire_bytes_per_round_by_node": [round(b) for b in per_round],
        "wire_bytes_model_per_round": round(statistics.mean(wire_model(n, world) for n in nodes)),
        "groups_formed": [n["groups_formed"] for n in nodes],
        "comm_breakdown_s": {
            k: round(statistics.mean(r.get(k, 0.0) for r in later), 3)
            for k in (
                "join_s",
                "encode_s",
                "allreduce_s",
                "outer_s",
                "check_s",
                "blob_s",
                "landing_s",
                "landing_wait_s",
            )  # (the last two: --overlap-steps)
        },
        "allreduce_phases_s": {
            k: round(statistics.mean(r.get("allreduce_phases_s", {}).get(k, 0.0) for r in later), 3)
            for k in sorted({k for r in later for k in r.get("allreduce_phases_s", {})})
        },
        "results_agree": len({r["result"] for n in nodes for r in n["rounds"][-1:]}) == 1,
    }


def _vs_sync(h: int, sync_per_step: list[float], summary: dict[str, Any]) -> float:
    """Bytes a node sends in H synchronous steps over those of one DiLoCo round (the worse
    node)."""
    by_node: list[float] = summary["wire_bytes_per_round_by_node"]
    return round(min(h * sync_per_step[i] / b for i, b in enumerate(by_node)), 2)


def overlap_loss_ratio(rounds: int) -> dict[str, float]:
    """Eval loss with the one-round delayed outer step over the loss without (bench.diloco's
    simulated workers, tiny model, same seed and data)."""
    import torch

    from bench.diloco import Setup, run_diloco
    from reference.data import Corpus
    from reference.model import GPTConfig
    from reference.outer import OuterConfig

    torch.set_num_threads(1)
    s = Setup(model=GPTConfig.preset("tiny"), workers=4, rounds=rounds, inner_steps=50, batch=8,
              inner_lr=INNER_LR, outer=OuterConfig(lr=OUTER_LR, momentum=OUTER_MOMENTUM),
              eval_rows=256, warm_start=200)  # fmt: skip
    corpus = Corpus.stdlib()
    eval_rows = corpus.eval_rows(s.model.seq_len, s.eval_rows, seed=1234)
    plain, _, _ = run_diloco(corpus, s, eval_rows, "int8")
    delayed, _, _ = run_diloco(corpus, s, eval_rows, "int8", overlap=True)
    return {"overlap_eval_loss": round(delayed, 4), "no_overlap_eval_loss": round(plain, 4),
            "overlap_loss_ratio": round(delayed / plain, 4)}  # fmt: skip


def overlap_on_wire(
    preset: str, rounds: int, rate_mbit: float, h: int, batch: int
) -> dict[str, Any]:
    """The one-round delayed outer step on the nodes' real path (bench/network_node.py
    ``--overlap``: round r's all-reduce in the background during round r+1's compute), against
    the plain step, same seed, data and steps (no time box): eval loss ratio and utilization."""
    common: list[object] = ["--preset", preset, "--inner-steps", h, "--batch", batch,
                            "--rounds", rounds, "--eval-rows", 256, "--fmt", "int8"]  # fmt: skip
    plain = run_nodes(2, rate_mbit, [common] * 2)
    delayed = run_nodes(2, rate_mbit, [[*common, "--overlap"]] * 2)
    for nodes in (plain, delayed):
        if len({n["final"] for n in nodes}) != 1:
            raise RuntimeError("the nodes' final weights differ")
    p_loss, d_loss = plain[0]["eval_loss"], delayed[0]["eval_loss"]
    return {
        "overlap_node_preset": preset,
        "overlap_node_rounds": rounds,
        "overlap_node_eval_loss": round(d_loss, 4),
        "no_overlap_node_eval_loss": round(p_loss, 4),
        "overlap_node_loss_ratio": round(d_loss / p_loss, 4),
        "overlap_node_utilization": summarize(delayed, h)["utilization"],
        "no_overlap_node_utilization": summarize(plain, h)["utilization"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 rounds per scenario (~10 min)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--inner-steps", type=int, default=50, help="H (the governed default)")
    p.add_argument(
        "--batch",
        type=int,
        default=NODE_BATCH_SIZE,
        help="rows per inner step (default: the node's, `coloco node run --batch-size`)",
    )
    p.add_argument("--rate-mbit", type=float, default=100.0)
    p.add_argument("--preset", default="cpu10m")
    p.add_argument("--sync-steps", type=int, default=3)
    p.add_argument("--slowdown", type=float, default=3.0)
    p.add_argument("--sparse-only", action="store_true",
                   help="only int8, the sync baseline and the sparse scenarios")  # fmt: skip
    p.add_argument("--overlap-node", type=int, default=0, metavar="ROUNDS",
                   help="only measure the delayed outer step on the nodes' real path, ROUNDS "
                   "rounds (e.g. --preset tiny --overlap-node 8)")  # fmt: skip
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"bench.network needs network namespaces: {reason}")
    if args.overlap_node:
        load0, t0 = os.getloadavg(), time.perf_counter()
        ov_node = overlap_on_wire(args.preset, args.overlap_node, args.rate_mbit,
                                  args.inner_steps, args.batch)  # fmt: skip
        emit("network_overlap", ov_node | {
            "load_avg_start": [round(x, 2) for x in load0],
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.perf_counter() - t0, 1)})  # fmt: skip
        return
    rounds = args.rounds or (3 if args.quick else 6)
    h, rate = args.inner_steps, args.rate_mbit
    t0 = time.perf_counter()
    load = os.getloadavg()
    common: list[object] = ["--preset", args.preset, "--inner-steps", h, "--batch", args.batch]
    others = 2 if args.quick else rounds  # the secondary scenarios: round 2 on is timed

    def scenario(
        name: str, n: int, rate_mbit: float, extra: list[list[object]], rounds: int = rounds
    ) -> Any:
        log.info("scenario %s: %d nodes at %g Mbit/s, %d rounds", name, n, rate_mbit, rounds)
        return run_nodes(n, rate_mbit, [[*common, "--rounds", rounds, *e] for e in extra])

    auto: list[object] = ["--budget-s", -1]  # each round sets the next round's time budget
    int8 = scenario("int8", 2, rate, [["--fmt", "int8", *auto]] * 2)
    s8 = summarize(int8, h)
    if args.sparse_only:  # int8, the sync baseline and the sparse scenarios only
        sync = scenario("sync", 2, rate, [["--sync-steps", args.sync_steps]] * 2)
        sync_per_step = [s["tx"] / s["sync_steps"] for s in sync]
        sparse = network_sparse.figures(scenario, summarize, h=h, rate=rate, others=others,
                                        sync_per_step=sync_per_step)  # fmt: skip
        emit("network", {"nodes": 2, "preset": args.preset, "inner_steps": h, "rounds": rounds,
                         "rate_mbit": rate, "utilization_int8": s8["utilization"],
                         "wire_bytes_per_round": s8["wire_bytes_per_round"],
                         "bytes_ratio_vs_sync_measured": _vs_sync(h, sync_per_step, s8),
                         "sync_wire_bytes_per_step": [round(b) for b in sync_per_step],
                         **sparse, "int8": s8, "load_avg_start": [round(x, 2) for x in load],
                         "wall_s": round(time.perf_counter() - t0, 1)})  # fmt: skip
        return
    # the same plain step with half the rows a step: half the compute per byte on the wire, to
    # show where utilization goes with the batch (docs/trainer.md, "The setting")
    half = max(1, args.batch // 2)
    small = [[*common[:-1], half, "--rounds", rounds, "--fmt", "int8", *auto]] * 2
    log.info("scenario int8, batch %d", half)
    s8h = summarize(run_nodes(2, rate, small), h)
    # the same with the one-round delayed outer step (round r's all-reduce behind round r+1's
    # compute): the option's utilization, its loss cost is overlap_loss_ratio below
    int8_ov = scenario("int8 overlap", 2, rate, [["--fmt", "int8", *auto, "--overlap"]] * 2)
    s8o = summarize(int8_ov, h)
    fp32 = scenario("fp32", 2, rate, [["--fmt", "fp32", *auto]] * 2, others)
    s32 = summarize(fp32, h)
    slow10 = summarize(
        scenario("int8 at a tenth", 2, rate / 10, [["--fmt", "int8", *auto]] * 2, others), h
    )
    sync = scenario("sync", 2, rate, [["--sync-steps", args.sync_steps]] * 2)
    sync_per_step = [s["tx"] / s["sync_steps"] for s in sync]
    # the sparse wire format, same links, same sync baseline (bench/network_sparse.py)
    sparse = network_sparse.figures(scenario, summarize, h=h, rate=rate, others=others,
                                    sync_per_step=sync_per_step)  # fmt: skip
    boxed: list[object] = ["--fmt", "int8", *auto]
    # the same two-node round without the slow node, run just before it: a ratio of two
    # scenarios run minutes apart would measure the shared machine's load drifting between them
    ref = summarize(scenario("reference for the slower node", 2, rate, [boxed] * 2, others), h)
    het = scenario(
        "3x slower node", 2, rate, [boxed, [*boxed, "--slowdown", args.slowdown]], others
    )
    sh = summarize(het, h, fast=[0])
    slow_rounds = _later(het[1])
    fast_tokens = statistics.mean(r["tokens"] for r in _later(het[0]))
    speed = sh["step_s"] / statistics.mean(r["step_s"] for r in slow_rounds)
    credited = statistics.mean(r["tokens"] for r in slow_rounds)
    ckpt = network_ckpt.run(args.preset, rate, 2)
    # the delayed outer step's loss cost on the nodes' real path (tiny model: a loss over 8
    # rounds of the 10M preset would take an hour); the simulation beside it in the full run
    ov_node = overlap_on_wire("tiny", 8, rate, h, args.batch)
    ov = {"overlap_loss_ratio": ov_node["overlap_node_loss_ratio"], **ov_node}
    if not args.quick:
        sim = overlap_loss_ratio(16)
        ov["overlap_loss_ratio_simulated"] = sim.pop("overlap_loss_ratio")
        ov |= {f"{k}_simulated": v for k, v in sim.items()}
    out: dict[str, Any] = {
        "nodes": 2,
        "params": int8[0]["params"],
        "preset": args.preset,
        "inner_steps": h,
        "rounds": rounds,
        "rounds_other_scenarios": others,
        "rate_mbit": rate,
        "utilization_int8": s8["utilization"],
        "utilization_int8_overlap": s8o["utilization"],
        "batch": args.batch,
        "utilization_int8_half_batch": s8h["utilization"],
        "utilization_model_int8_half_batch": s8h["utilization_model"],
        "half_batch": half,
        "utilization_model_int8_overlap": s8o["utilization_model"],
        "utilization_fp32": s32["utilization"],
        "utilization_model_int8": s8["utilization_model"],
        "utilization_model_fp32": s32["utilization_model"],
        "utilization_int8_10mbit": slow10["utilization"],
        "utilization_model_int8_10mbit": slow10["utilization_model"],
        "wire_bytes_per_round": s8["wire_bytes_per_round"],
        "wire_bytes_model_per_round": s8["wire_bytes_model_per_round"],
        "int8_wire_ratio_vs_fp32": round(
            s32["wire_bytes_per_round"] / s8["wire_bytes_per_round"], 3
        ),
        "sync_wire_bytes_per_step": [round(b) for b in sync_per_step],
        "bytes_ratio_vs_sync_measured": _vs_sync(h, sync_per_step, s8),
        "slow_node_round_time_ratio": round(sh["round_wall_s"] / ref["round_wall_s"], 4),
        "slow_node_reference_round_wall_s": ref["round_wall_s"],
        "slow_node_credit_ratio": round(credited / (fast_tokens * speed), 4),
        "slow_node_speed_ratio": round(speed, 3),
        "slow_node_steps": [r["steps"] for r in het[1]["rounds"]],
        "time_budget": (
            "trainer.round.timebox (node run --time-box): H + 1 steps at the fastest signed pace "
            "of the round before, never below half the median pace; every scenario"
        ),
        **ov,
        **ckpt,
        **sparse,
        "int8": s8,
        "int8_overlap": s8o,
        "int8_half_batch": s8h,
        "fp32": s32,
        "int8_10mbit": slow10,
        "heterogeneous": sh,
        "load_avg_start": [round(x, 2) for x in load],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.perf_counter() - t0, 1),
        "gpu": "none in this session: CPU only (gloo)",
    }
    emit("network", out)


if __name__ == "__main__":
    main()
