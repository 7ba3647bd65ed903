"""One DiLoCo node of ``bench.network``, run inside its own network namespace.

    ip netns exec NS python -m bench.network_node --index I --hub 10.77.0.254 ... --out F.json

Per round: join the round's membership at the rendezvous
(:class:`trainer.network.membership.Rendezvous`, a TCPStore in the hub namespace); keep the gloo
group while the member list is unchanged (formed once, not every round); run the inner steps that
fit in the round's time box (`--budget-s -1`: trainer.round.timebox, as `coloco node run
--time-box`, from the members' signed paces); encode ``base - local`` with the codec's fused
subtract-and-quantize kernel (``--fmt sparse``: the sparse encoder with this node's error-feedback
residual, reference.codec.sparse.encode_feedback); average it weighted by tokens
(:func:`trainer.network.allreduce.average`); take the bit-exact outer step
(:func:`reference.outer.outer_step`) on each piece of the mean as it lands; check every member
holds the same weights; upload the commitment (the same packet, :mod:`reference.commitment`)
to the ledger's blob route with the node's real
:class:`trainer.network.ledger_client.LedgerClient`, in the background while the next round
computes.
Nothing else is sent: no per-round checkpoint to the store or the ledger.

``--slowdown F`` emulates a node F times slower (after each step it sleeps F-1 times that step's
compute): on 2 shared cores, a third busy process would measure CPU contention, not the protocol.
Writes one JSON file of per-round records and the eth0 byte counters read inside the namespace.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from protocol.keys import NodeKey
from reference import commitment
from reference.codec import Packet, encode
from reference.codec.sparse import encode_feedback
from reference.data import Corpus, ShardSpec
from reference.inner import CARRY_STATE, InnerConfig, InnerTrainer, StepInfo
from reference.model import GPT, GPTConfig, evaluate
from reference.outer import OuterConfig, OuterState
from trainer.network.allreduce import average
from trainer.network.coordination.registry import AnyKeyRegistry
from trainer.network.ledger_client import LedgerClient
from trainer.network.membership import MembershipConfig, Rendezvous
from trainer.round import timebox
from trainer.round.boundaries import BoundaryStore
from trainer.round.diloco import DiLoCo, RoundSettings
from trainer.round.node import offline_domain
from trainer.round.runconfig import INNER_LR, NODE_BATCH_SIZE, OUTER_LR, OUTER_MOMENTUM

NET = Path("/sys/class/net/eth0/statistics")


def counters() -> tuple[int, int]:
    return int((NET / "tx_bytes").read_text()), int((NET / "rx_bytes").read_text())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--hub", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ledger-port", type=int, required=True)
    p.add_argument("--preset", default="cpu10m")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--inner-steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=NODE_BATCH_SIZE)
    p.add_argument("--fmt", default="int8")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="inner time box in s; 0: none; -1: trainer.round.timebox's (round 1 runs H "
                   "steps, each later round's box is H + 1 steps at the fastest member's pace "
                   "of the round before)")  # fmt: skip
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--sync-steps", type=int, default=0, help="measure sync DP instead")
    p.add_argument("--overlap", action="store_true",
                   help="one-round delayed outer step: round r's all-reduce runs in the background "
                   "during round r+1's compute (started from base - own progress)")  # fmt: skip
    p.add_argument("--overlap-steps", type=int, default=0, metavar="TAU",
                   help="the bounded overlap: round r's all-reduce runs during round r+1's "
                   "first TAU inner steps, which train on from this node's own end of round r; "
                   "after step TAU (waiting if the average is not in) the node takes the outer "
                   "step and moves its weights by (new base - its end of round r) "
                   "(bench.diloco's overlap_steps)")  # fmt: skip
    p.add_argument("--trace", action="store_true",
                   help="train as `coloco node run` does (DiLoCo.train_local): the committed "
                   "trace of the round's boundary states every H/10 steps (or TAU), hashed and "
                   "sketched in a background thread and written to a BoundaryStore, and the "
                   "bounded landing at the first boundary after step 0")  # fmt: skip
    p.add_argument("--work-dir", default="", help="--trace: the boundary store's folder")
    p.add_argument(
        "--no-store",
        action="store_true",
        help="--trace without writing the boundary states (their cost apart)",
    )
    p.add_argument("--eval-rows", type=int, default=0, help="eval loss on N held-out rows at end")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.overlap and args.overlap_steps:
        p.error("--overlap and --overlap-steps exclude each other")
    bounded = args.overlap_steps > 0
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s n{args.index} %(message)s")
    log = logging.getLogger("bench.network_node")

    torch.set_num_threads(1)
    cfg = GPTConfig.preset(args.preset)
    key = NodeKey.from_private_key((args.index + 1).to_bytes(32, "big"))
    address = str(key.address)
    run_id = bytes(32)
    corpus = Corpus.stdlib()
    model = GPT(cfg, seed=0)
    diloco = DiLoCo(model, OuterState.from_model(model))
    membership = MembershipConfig(
        min_nodes=args.world, join_window_s=0.0, rendezvous_timeout_s=600, collective_timeout_s=300
    )
    rdv = Rendezvous(args.hub, args.port, key=key, domain=offline_domain(run_id), run_id=run_id,
                     registry=AnyKeyRegistry(), cfg=membership)  # fmt: skip
    ledger = LedgerClient(f"http://{args.hub}:{args.ledger_port}")
    outer_cfg = OuterConfig(lr=OUTER_LR, momentum=OUTER_MOMENTUM)
    # the protocol's inner mode (reference.inner.CARRY_STATE) with that mode's AdamW constants
    settings = RoundSettings(
        inner=InnerConfig(steps=args.inner_steps, lr=INNER_LR, batch_size=args.batch),
        outer=outer_cfg,
        wire_format=args.fmt,
        trace_interval=args.overlap_steps or max(1, args.inner_steps // 10),
    ).with_inner_state(CARRY_STATE)
    store = BoundaryStore(Path(args.work_dir or f"/tmp/bench-node-{args.index}"), keep_rounds=1)
    inner_cfg = settings.inner
    records: list[dict[str, object]] = []
    group = None
    members_seen: tuple[str, ...] = ()
    groups_formed = 0

    def rows_for(r: int) -> torch.Tensor:
        spec = ShardSpec.for_node(run_id, r, address, inner_cfg.tokens(cfg.seq_len), (7000, 3000))
        return corpus.shard_rows(spec, cfg.seq_len)

    last_step_end = [time.perf_counter()]

    step_times: list[float] = []

    last_cpu = [0.0]  # the training thread's CPU clock at the last step's end

    def slow(info: StepInfo) -> None:
        last_cpu[0] = time.thread_time()
        now = time.perf_counter()
        step_times.append(now - last_step_end[0])  # this step's wall time, slowdown included
        if args.slowdown > 1.0:
            time.sleep((args.slowdown - 1.0) * (now - last_step_end[0]))
        last_step_end[0] = time.perf_counter()

    if args.sync_steps:
        members = rdv.join(1)
        group = rdv.form_group(members, torch.device("cpu"))
        trainer = InnerTrainer(model, InnerConfig(steps=1, lr=INNER_LR, batch_size=args.batch))
        rows = rows_for(1)
        tx0, rx0 = counters()
        t0 = time.perf_counter()
        for step in range(args.sync_steps):
            batch = rows[step * args.batch : (step + 1) * args.batch]
            _, loss = model(batch[:, :-1], batch[:, 1:])
            assert loss is not None
            model.zero_grad(set_to_none=True)
            loss.backward()
            grads = torch.cat([q.grad.reshape(-1) for q in model.parameters()])  # type: ignore[union-attr]
            dist.all_reduce(grads)
        wall = time.perf_counter() - t0
        tx1, rx1 = counters()
        del trainer
        Path(args.out).write_text(json.dumps({"sync_steps": args.sync_steps, "tx": tx1 - tx0,
                                              "rx": rx1 - rx0, "wall_s": wall}))  # fmt: skip
        group.close()
        return

    budget = args.budget_s
    auto_budget = budget < 0
    start: torch.Tensor | None = None  # --overlap: where this node's next inner phase starts
    pending: dict[str, Any] = {}  # --overlap: the round in flight's all-reduce (thread, result)

    def finish_pending() -> tuple[float, int, bytes]:
        """--overlap: wait for the last round's average, apply it, check the hashes."""
        thread = pending.pop("thread", None)
        if thread is None:
            return 0.0, 0, diloco.base_hash()
        t = time.perf_counter()
        if thread.ident is None:
            thread.start()
        thread.join()
        if "error" in pending:
            raise RuntimeError(f"background all-reduce failed: {pending.pop('error')}")
        mean, sent = pending.pop("result")
        waited = time.perf_counter() - t
        diloco.outer_step(mean, settings)
        assert group is not None
        digest = diloco.base_hash()
        group.check_same(digest, timedelta(seconds=300))
        return waited, int(sent), digest

    def in_background(packet: Packet, weight: int) -> None:
        def run() -> None:
            try:
                pending["result"] = average(packet, None, timeout=timedelta(seconds=300),
                                            weight=weight)  # fmt: skip
            except Exception as exc:  # reported by finish_pending in the main thread
                pending["error"] = exc

        # started after the next round's join (start_pending): the join's small messages would
        # otherwise queue behind 10.9 MB on the uplink (measured: join 0.23 s against 0.09 s)
        pending["thread"] = threading.Thread(target=run, daemon=True)

    def start_uploads() -> None:
        """The commitment uploads not started yet (the round before's): after the next join,
        and with the bounded overlap after the landing, so they never share the uplink with
        the exchange (the node's attestation goes out at its landing: trainer.round.node)."""
        for th in uploads:
            if th.ident is None:
                th.start()

    def start_pending() -> None:
        thread = pending.get("thread")
        if thread is not None and thread.ident is None:
            thread.start()

    def step_piece(a: int, b: int, values: torch.Tensor) -> None:
        diloco.state.step_range(a, b, values, settings.outer)

    def land(own_end: torch.Tensor, landed: dict[str, Any]) -> None:
        """--overlap-steps: the last round's average lands (waited for if still on the wire),
        the outer step and the hash check run, and the weights move by (new base - ``own_end``);
        ``landed`` gets the wait, the bytes sent, the result and the time it all took."""
        t, cpu = time.perf_counter(), time.thread_time()
        landed["wait_s"], landed["sent"], landed["result"] = finish_pending()
        start_uploads()
        with torch.no_grad():
            views = diloco.state.layout.unflatten(diloco.state.base - own_end)
            for name, param in model.named_parameters():
                param.add_(views[name])
        landed["s"] = time.perf_counter() - t
        landed["cpu_s"] = time.thread_time() - cpu

    def land_at(own_end: torch.Tensor, landed: dict[str, Any]) -> Callable[[StepInfo], None]:
        """--overlap-steps: :func:`land` after inner step TAU, waiting for the average if it is
        still on the wire. Every member lands at the same step: the hash check is a collective
        (a node that landed once the average was in, at a step of its own, would hold its peers
        in that check), and the audit must know where the weights moved."""

        def on_step(info: StepInfo) -> None:
            slow(info)
            if info.step == args.overlap_steps:
                land(own_end, landed)
                landed["step"] = info.step
                last_step_end[0] = time.perf_counter()  # the next step's time starts here

        return on_step

    def landing(landed: dict[str, Any]) -> Callable[[], None]:
        """--trace with --overlap-steps: DiLoCo.train_local's landing (it moves the weights
        itself); ``landed`` gets what :func:`land` records, and the landing's thread CPU."""

        def run() -> None:
            t, cpu = time.perf_counter(), time.thread_time()
            landed["wait_s"], landed["sent"], landed["result"] = finish_pending()
            start_uploads()
            landed["s"] = time.perf_counter() - t
            landed["cpu_s"] = time.thread_time() - cpu
            landed["step"] = settings.trace_interval
            last_step_end[0] = time.perf_counter()

        return run

    residual: torch.Tensor | None = None  # --fmt sparse: this node's error feedback
    uploads: list[threading.Thread] = []
    upload_bytes = 0
    tx0, rx0 = counters()
    t_prev = time.perf_counter()
    for r in range(1, args.rounds + 1):
        t_round = time.perf_counter()
        members = rdv.join(r)
        start_pending()  # --overlap: last round's all-reduce, during this round's compute
        if not bounded:  # last round's commitment upload, during this round's compute
            start_uploads()
        if members.addresses != members_seen:  # rebuilt only when membership changes
            if group is not None:
                group.close()
            group = rdv.form_group(members, torch.device("cpu"))
            members_seen, groups_formed = members.addresses, groups_formed + 1
        assert group is not None
        rows = rows_for(r)
        if not args.trace:  # (DiLoCo.train_local does both itself)
            diloco.sync_inner_model()
        if (
            start is not None and not args.trace
        ):  # --overlap: the newest base plus this node's unaveraged progress
            # (--overlap-steps: this node's own end of the last round)
            with torch.no_grad():
                views = diloco.state.layout.unflatten(start)
                for name, param in model.named_parameters():
                    param.copy_(views[name])
        if diloco.inner is None:
            diloco.inner = InnerTrainer(model, inner_cfg, keep_state=settings.keep_inner_state)
        t_train = time.perf_counter()
        cpu_train = last_cpu[0] = time.thread_time()
        last_step_end[0] = t_train
        step_times.clear()
        landed: dict[str, Any] = {}
        box = budget if budget > 0 else None
        lands = bounded and "thread" in pending and start is not None
        if args.trace:  # the node's own path: the trace, and the landing inside the phase
            local = diloco.train_local(rows, settings, on_step=slow, budget_s=box,
                                       start=start if (bounded or args.overlap) else None,
                                       residual=residual,
                                       keep=None if args.no_store else store.keeper(r),
                                       landing=landing(landed) if lands else None)  # fmt: skip
            inner = local.inner
            t_enc = t_train + inner.seconds  # the encode and the trace's last commits after it
            assert local.packet is not None and local.trace is not None
            packet, residual = local.packet, local.residual
            sketched = diloco.state.layout.unflatten(diloco.state.base) if landed else None
            if not args.no_store:
                store.finish(r, local.trace, base=sketched)
            flat_local = diloco.state.layout.flatten(dict(model.named_parameters()))
            stepped_s = inner.seconds - float(landed.get("s", 0.0))
        else:
            on_step: Callable[[StepInfo], None] = slow
            if lands:
                assert start is not None
                on_step = land_at(start, landed)
            inner = diloco.inner.train(rows, on_step=on_step, budget_s=box)
            stepped_s = inner.seconds - float(landed.get("s", 0.0))  # less a landing at TAU
            if lands and not landed:  # the time box stopped the phase before TAU
                assert start is not None
                land(start, landed)
                landed["step"] = inner.steps
            t_enc = time.perf_counter()
        # the training thread's CPU in its steps (less the landing's; with --trace the copies
        # of the boundary states taken between steps are in it)
        compute_cpu_s = last_cpu[0] - cpu_train - float(landed.get("cpu_s", 0.0))
        landing_s = float(landed.get("s", 0.0))  # communication inside the inner phase
        compute_s = t_enc - t_train - landing_s
        if auto_budget:  # this node's pace under this round's conditions (trainer.round.timebox, as
            # `node run --time-box`): signed, posted before the all-reduce so nobody waits
            timebox.post_pace(rdv.board, r, inner)
        origin = diloco.state.base if start is None or bounded else start
        if not args.trace:
            flat_local = diloco.state.layout.flatten(dict(model.named_parameters()))
            if args.fmt == "sparse":  # top-k of (origin - local + residual), the rest carried
                packet, residual = encode_feedback(origin, flat_local, residual)
            else:
                packet = encode(origin, flat_local, args.fmt)  # fused origin - local, quantized
        t_ar = time.perf_counter()
        phases: dict[str, float] = {}
        if bounded:  # round r's all-reduce runs during round r+1's first TAU steps
            sent = int(landed.get("sent", 0))  # round r-1's, landed in this round
            result = landed.get("result", diloco.base_hash())
            t_outer = t_check = time.perf_counter()
            in_background(packet, inner.tokens)
            start = flat_local.clone()  # the next round trains on from here
        elif not args.overlap:  # the outer step of each piece of the mean as it lands, while
            # the rest is on the wire (same bits as the whole step after: elementwise)
            _, sent = average(packet, None, timeout=timedelta(seconds=300), weight=inner.tokens,
                              timings=phases, on_piece=step_piece)  # fmt: skip
            t_outer = time.perf_counter()
            diloco.sync_inner_model()
            result = diloco.base_hash()
            t_check = time.perf_counter()
            group.check_same(result, timedelta(seconds=300))
        else:  # apply round r-1's average (its all-reduce ran during this round's compute)
            own = origin - flat_local
            t_ar = time.perf_counter()
            waited, sent, result = finish_pending()
            t_outer = t_ar + waited  # then the outer step, the hash and its check
            t_check = time.perf_counter()  # then the next all-reduce starts, and the next start
            in_background(packet, inner.tokens)
            start = diloco.state.base - own
        t_blob = time.perf_counter()
        blob = commitment.blob(packet)
        upload_bytes += len(blob)
        digest = commitment.commitment_hash(packet)
        # started after the next round's join: on the same uplink it would queue the join's
        # small messages behind 10.9 MB (measured: join 0.2 s a round against 0.07 s)
        uploads.append(threading.Thread(target=ledger.put_blob, args=(digest, blob), daemon=True))
        t_end = time.perf_counter()
        records.append({
            "round": r, "members": len(members.addresses), "steps": inner.steps,
            "tokens": inner.tokens, "compute_s": compute_s, "compute_cpu_s": compute_cpu_s,
            "step_s": stepped_s / max(inner.steps, 1),
            "comm_s": t_end - t_enc + landing_s, "wall_s": t_end - t_prev,
            "join_s": t_train - t_round, "landing_s": landing_s,
            "landing_wait_s": float(landed.get("wait_s", 0.0)),
            "landed_at_step": landed.get("step"),
            "encode_s": t_ar - t_enc, "allreduce_s": t_outer - t_ar,
            "outer_s": t_check - t_outer, "check_s": t_blob - t_check, "blob_s": t_end - t_blob,
            "allreduce_phases_s": phases, "allreduce_bytes_sent": sent,
            "loss": inner.final_loss, "result": result.hex()[:16], "budget_s": budget,
            "step_times_s": [round(x, 4) for x in step_times],
        })  # fmt: skip
        if auto_budget:  # next round's box: H + 1 steps at this round's fastest pace
            rdv.store.wait([timebox.pace_key(r, a) for a in members.addresses])  # --overlap
            budget = timebox.budget(rdv.board, r + 1, members.addresses, args.inner_steps) or 0.0
        log.info("round %d: %d steps, compute %.1fs, wall %.1fs", r, inner.steps, compute_s,
                 t_end - t_prev)  # fmt: skip
        t_prev = t_end
    last_sent = 0  # --overlap: the last round's all-reduce lands after the loop
    if args.overlap or bounded:
        last_sent = finish_pending()[1]  # the last round's average
        diloco.sync_inner_model()
    eval_loss = None
    if args.eval_rows:
        eval_loss = evaluate(model, corpus.eval_rows(cfg.seq_len, args.eval_rows, seed=1234))
    for th in uploads:
        if th.ident is None:
            th.start()
        th.join()
    # the last round's group stays up until every member is done (a barrier), then leaves
    rdv.announce_leave(args.rounds + 1)
    tx1, rx1 = counters()
    Path(args.out).write_text(json.dumps({
        "index": args.index, "rounds": records, "tx": tx1 - tx0, "rx": rx1 - rx0,
        "numel": diloco.state.base.numel(), "packet_bytes": packet.nbytes,
        "allreduce_bytes_after_loop": last_sent,
        "commitment_blob_bytes": upload_bytes // args.rounds, "groups_formed": groups_formed,
        "params": model.num_params(), "eval_loss": eval_loss, "final": diloco.base_hash().hex(),
    }))  # fmt: skip
    if group is not None:
        dist.barrier()
        group.close()


if __name__ == "__main__":
    main()
