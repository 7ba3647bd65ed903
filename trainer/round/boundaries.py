"""The node's boundary states: kept on disk until the round's audit window closes, served on demand.

Every ``traceInterval`` inner steps the node commits its state (reference.trace); the
attestation signs the root. The ledger may later ask for one boundary of a round (an audit), and
the node answers with that state (a blob whose id is the state's hash, protocol.blobs) and its
Merkle proof. So the states stay here, under ``<work dir>/boundaries/<round>/``:

- ``<index>.safetensors``: the boundary state (weights, AdamW moments, ...);
- ``trace.json``: the round's boundaries (index, step, state hash, sketch hash) and root.

Bounded: a round is removed once ``keep_rounds`` newer rounds are stored (the audit window; the
ledger asks within it), and the oldest rounds go first while the folder holds more than
``max_bytes`` (logged as a warning: a boundary asked for after that cannot be served, and the
node fails that audit). The newest round is never pruned.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from protocol.blobs import decode_blob, encode_blob
from protocol.errors import LedgerError, TrainerError
from protocol.files import DirectWriter
from protocol.hashing import hash_state_dict
from protocol.types import Bytes32
from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.sketch import make_sketch
from reference.trace import WEIGHTS, Boundary, Trace, state_hash
from trainer.network.ledger_client import LedgerClient

log = logging.getLogger(__name__)

KEEP_ROUNDS = 4
"""Rounds of boundaries kept: the round being audited can be asked for until 3 rounds later."""
MAX_BYTES = 8 << 30
"""Disk the boundary states may take (8 GiB: a cpu10m round of 11 boundaries is ~1.3 GB)."""
TRACE_FILE = "trace.json"
SKETCH_BASE_FILE = "sketch_base.safetensors"  # a round's sketch base when not boundary 0's
LINGER_S = 60.0
"""How long ``coloco node run`` waits after its last round for the ledger to judge it, serving the
boundaries its audit asks for (NodeSettings.audit_linger_s)."""
SKETCH_REQUEST = -2
"""A request's ``at_step`` asking for a boundary's sketch only (ledger.core.models)."""
WRITES_IN_FLIGHT = 2
"""Boundary states waiting to be written while training goes on (each a copy of the state)."""


Advance = Callable[[int, dict[str, Tensor], int, int], dict[str, Tensor]]
"""``advance(round, state, from_step, steps)``: the node's own inner steps re-run from a kept
state (the node's round inputs: its rows, lr schedule; trainer.round.boundaries.recompute)."""


def recompute(rows_of: Callable[[int], Tensor], cfg: InnerConfig, model_cfg: GPTConfig) -> Advance:
    """An :data:`Advance` re-running ``cfg``'s AdamW steps over round ``r``'s rows
    (``rows_of(r)``, in reading order) on this process's threads."""
    from reference.bisect import as_segment_state, schedule_step
    from reference.segment import capture_state, load_state

    def advance(
        round: int, state: dict[str, Tensor], from_step: int, steps: int
    ) -> dict[str, Tensor]:
        start = as_segment_state(state)
        rows = rows_of(round)[from_step * cfg.batch_size : (from_step + steps) * cfg.batch_size]
        model = GPT(model_cfg, init=False)  # load_state sets every parameter
        trainer = InnerTrainer(model, dataclasses.replace(cfg, steps=steps), keep_state=True)
        opt = trainer.optimizer()
        load_state(model, opt, start)
        trainer.global_step = schedule_step(start)
        trainer.train(rows)
        return capture_state(model, opt)

    return advance


@dataclass(frozen=True)
class ServedBoundary:
    """What the node uploads for one boundary: the state's blob, its commitment and proof."""

    round: int
    boundary: Boundary
    blob: bytes
    proof: list[Bytes32]
    root: Bytes32


class BoundaryStore:
    """``<work dir>/boundaries``: the boundary states of the node's last rounds."""

    def __init__(
        self, work_dir: Path, *, keep_rounds: int = KEEP_ROUNDS, max_bytes: int = MAX_BYTES
    ) -> None:
        if keep_rounds < 1:
            raise TrainerError(f"keep_rounds must be at least 1, got {keep_rounds}")
        self.root = Path(work_dir) / "boundaries"
        self.keep_rounds = keep_rounds
        self.max_bytes = max_bytes
        self._writer: ThreadPoolExecutor | None = None  # started by keeper, stopped by close
        self._writes: list[Future[None]] = []
        self._direct = DirectWriter()  # one aligned buffer for every state and sketch base
        self._lock = threading.Lock()  # the writes in flight (the keepers of two rounds at once)

    def _dir(self, round: int) -> Path:
        return self.root / f"{round:08d}"

    def rounds(self) -> list[int]:
        """The rounds whose trace is complete here, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(int(d.name) for d in self.root.iterdir()
                      if d.name.isdigit() and (d / TRACE_FILE).is_file())  # fmt: skip

    def keeper(self, round: int) -> Callable[[Boundary, dict[str, Tensor]], None]:
        """The ``keep`` of reference.trace.TraceBuilder for ``round``: writes each boundary's state
        in a background thread while the inner steps go on (at most :data:`WRITES_IN_FLIGHT`
        states wait in memory; :meth:`finish` waits for them). A round trained again starts
        from an empty folder."""
        self._wait()
        folder = self._dir(round)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="boundary-writer")
        writer, direct = self._writer, self._direct

        def write(path: Path, state: dict[str, Tensor]) -> None:
            direct.write_tensors(path, state)  # O_DIRECT, the blob made in its buffer

        def keep(boundary: Boundary, state: dict[str, Tensor]) -> None:
            while True:  # (two rounds' trace threads may keep at once: the last one's tail)
                with self._lock:
                    if len(self._writes) < WRITES_IN_FLIGHT:
                        break
                    oldest = self._writes.pop(0)
                oldest.result()
            path = folder / f"{boundary.index:04d}.safetensors"
            future = writer.submit(write, path, state)
            with self._lock:
                self._writes.append(future)

        return keep

    def _wait(self) -> None:
        """Wait for the states being written (raising the first write's error)."""
        with self._lock:
            writes, self._writes = self._writes, []
        for future in writes:
            future.result()

    def close(self) -> None:
        """Wait for the states being written and stop the writer thread (a later round's
        :meth:`keeper` starts a new one: a node trained again after its run loop, as a rejoin
        does, keeps its boundaries)."""
        self._wait()
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None

    def finish(
        self, round: int, trace: Trace, *, base: dict[str, Tensor] | None = None
    ) -> list[int]:
        """Record ``round``'s trace (its boundaries' files are written) and prune; returns the
        rounds removed. ``base``: the weights the round's sketches are taken from when they are
        not boundary 0's (the bounded overlap: the attested base its boundary 1 moved to), kept
        beside the states for :meth:`serve_sketch`."""
        self._wait()
        folder = self._dir(round)
        missing = [b.index for b in trace.boundaries
                   if not (folder / f"{b.index:04d}.safetensors").is_file()]  # fmt: skip
        if missing:
            raise TrainerError(f"round {round}: boundary states {missing} were not written")
        if base is not None:
            self._direct.write_tensors(  # (the states' writer: its buffer, its lock)
                folder / SKETCH_BASE_FILE, {WEIGHTS + n: t for n, t in base.items()}
            )
        doc = {"round": round, "root": "0x" + trace.root.hex(),
               "boundaries": [b.to_json() for b in trace.boundaries]}  # fmt: skip
        tmp = folder / (TRACE_FILE + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(folder / TRACE_FILE)
        return self.prune(newest=round)

    def trace(self, round: int) -> Trace:
        """The committed trace of ``round`` (TrainerError when it is not kept)."""
        path = self._dir(round) / TRACE_FILE
        if not path.is_file():
            raise TrainerError(
                f"round {round}: no boundary states kept (kept: {self.rounds()}); they are pruned "
                f"after {self.keep_rounds} rounds or past {self.max_bytes} bytes"
            )
        doc = json.loads(path.read_text())
        return Trace(tuple(
            Boundary(int(b["index"]), int(b["step"]), Bytes32(bytes.fromhex(b["stateHash"][2:])),
                     Bytes32(bytes.fromhex(b["sketchHash"][2:])))
            for b in doc["boundaries"]
        ))  # fmt: skip

    def serve(self, round: int, index: int) -> ServedBoundary:
        """Boundary ``index`` of ``round``: its state's blob, checked against the trace here."""
        trace = self.trace(round)
        proof = trace.proof(index)
        boundary = trace.boundaries[index]
        blob = (self._dir(round) / f"{index:04d}.safetensors").read_bytes()
        state = decode_blob(blob, max_bytes=len(blob))
        if state_hash(state) != boundary.state_hash:
            raise TrainerError(f"round {round} boundary {index}: the file on disk was altered")
        return ServedBoundary(round, boundary, blob, proof, trace.root)

    def serve_sketch(self, round: int, index: int) -> ServedBoundary:
        """Boundary ``index``'s sketch (reference.sketch) as a blob, recomputed from its kept state
        against the round's base (boundary 0's weights, or the base :meth:`finish` kept) and
        checked against its leaf."""
        trace = self.trace(round)
        served = self.serve(round, index)
        state = decode_blob(served.blob, max_bytes=len(served.blob))
        kept = self._dir(round) / SKETCH_BASE_FILE
        if kept.is_file():
            blob = kept.read_bytes()
            base = decode_blob(blob, max_bytes=len(blob))
        elif index == 0:
            base = state
        else:
            first = (self._dir(round) / f"{0:04d}.safetensors").read_bytes()
            base = decode_blob(first, max_bytes=len(first))
        sketch = make_sketch(state, base, served.boundary.state_hash)
        blob = encode_blob(sketch)
        if hash_state_dict(sketch) != served.boundary.sketch_hash:
            raise TrainerError(f"round {round} boundary {index}: its sketch does not hash to the "
                               "committed leaf (a kept state was altered)")  # fmt: skip
        return ServedBoundary(round, served.boundary, blob, trace.proof(index), trace.root)

    def state_at(self, round: int, boundary: int, step: int, advance: Advance) -> dict[str, Tensor]:
        """The node's state after ``step`` inner steps of ``round``, recomputed from its kept
        ``boundary`` (which must come at or before ``step``) by ``advance`` (a bisection's probe,
        ledger.judge.bisect: the node re-runs its own steps, on its own threads)."""
        trace = self.trace(round)
        if not 0 <= boundary < len(trace.boundaries):
            raise TrainerError(f"round {round} has boundaries 0..{len(trace.boundaries) - 1}, "
                               f"not {boundary}")  # fmt: skip
        start = trace.boundaries[boundary]
        ends = [b.step for b in trace.boundaries if b.step > start.step]
        if not start.step <= step <= (ends[0] if ends else start.step):
            raise TrainerError(f"round {round}: step {step} is not inside the segment after "
                               f"boundary {boundary} (step {start.step})")  # fmt: skip
        at_end = bool(ends) and step == ends[0]  # the segment's end: its committed state
        blob = (self._dir(round) / f"{boundary + at_end:04d}.safetensors").read_bytes()
        state = decode_blob(blob, max_bytes=len(blob))
        if at_end or step == start.step:
            return state
        return advance(round, state, start.step, step - start.step)

    def size(self) -> int:
        if not self.root.is_dir():
            return 0
        return sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file())

    def prune(self, *, newest: int) -> list[int]:
        """Remove rounds older than the audit window, then the oldest while over ``max_bytes``
        (never ``newest``)."""
        removed: list[int] = []
        folders = sorted(int(d.name) for d in self.root.iterdir() if d.name.isdigit())
        for r in folders:
            if r <= newest - self.keep_rounds:
                shutil.rmtree(self._dir(r))
                removed.append(r)
        log.debug("boundaries: rounds %s past the audit window removed", removed)
        left = [r for r in folders if r not in removed and r != newest]
        while left and self.size() > self.max_bytes:
            r = left.pop(0)
            log.warning(
                "boundaries: %s holds more than %d bytes: round %d's states removed before its "
                "audit window closed (an audit of it now fails); give the node more disk",
                self.root, self.max_bytes, r,
            )  # fmt: skip
            shutil.rmtree(self._dir(r))
            removed.append(r)
        if removed:
            log.info("boundaries: removed rounds %s, kept %s (%d bytes)", removed, self.rounds(),
                     self.size())  # fmt: skip
        return removed


def answer_requests(
    store: BoundaryStore,
    ledger: LedgerClient,
    run_id: bytes,
    node: str,
    advance: Advance | None = None,
) -> int:
    """Serve the ledger's pending requests for ``node``'s boundaries of run ``run_id``: upload
    each state (the ledger client's signed blob PUT), then deliver its commitment and proof; a
    request for the state after ``at_step`` steps (a bisection's probe) is recomputed from its
    boundary by ``advance`` and delivered by hash. Returns how many were delivered; a request
    this node cannot serve (the round is no longer kept, no ``advance``) is logged and left to
    its deadline. A request for a boundary's sketch (``sketch``, at_step -2) uploads the sketch
    (a few KiB) under its hash instead of the state."""
    run = "0x" + run_id.hex()
    delivered = 0
    for request in ledger.boundary_requests(node):
        if str(request["run_id"]).lower() != run:
            continue
        r, index = int(request["round"]), int(request["boundary"])
        at_step = int(request.get("at_step", -1))
        if at_step >= 0:
            delivered += _answer_probe(store, ledger, run, node, request, advance=advance)
            continue
        sketch = at_step == SKETCH_REQUEST
        try:
            served = store.serve_sketch(r, index) if sketch else store.serve(r, index)
        except TrainerError as exc:
            log.error("the ledger asked for boundary %d of round %d: %s", index, r, exc)
            continue
        if "0x" + served.root.hex() != str(request["trace_root"]).lower():
            log.error("the ledger asked for boundary %d of round %d under traceRoot %s, this "
                      "node kept 0x%s", index, r, request["trace_root"],
                      served.root.hex())  # fmt: skip
            continue
        b = served.boundary
        ledger.put_blob(b.sketch_hash if sketch else b.state_hash, served.blob)
        ledger.deliver_boundary({
            "run_id": run, "round": r, "node": node, "boundary": index, "step": b.step,
            "state_hash": "0x" + b.state_hash.hex(), "sketch_hash": "0x" + b.sketch_hash.hex(),
            "proof": ["0x" + p.hex() for p in served.proof],
        } | ({"sketch": True} if sketch else {}))  # fmt: skip
        log.info("%s %d of round %d delivered (%d bytes)", "the sketch of boundary" if sketch
                 else "boundary", index, r, len(served.blob))  # fmt: skip
        delivered += 1
    return delivered


def _answer_probe(
    store: BoundaryStore,
    ledger: LedgerClient,
    run: str,
    node: str,
    request: dict[str, object],
    *,
    advance: Advance | None,
) -> int:
    r, index, at_step = (
        int(str(request["round"])),
        int(str(request["boundary"])),
        int(str(request["at_step"])),
    )
    if advance is None:
        log.error("the ledger asked for the state after %d steps of round %d (a bisection): "
                  "this node has no round inputs to recompute it", at_step, r)  # fmt: skip
        return 0
    try:
        state = store.state_at(r, index, at_step, advance)
    except TrainerError as exc:
        log.error("the ledger asked for the state after %d steps of round %d: %s", at_step, r, exc)
        return 0
    digest = state_hash(state)
    ledger.put_blob(digest, encode_blob(state))
    ledger.deliver_boundary({
        "run_id": run, "round": r, "node": node, "boundary": index, "step": at_step,
        "state_hash": "0x" + digest.hex(), "sketch_hash": "0x" + "00" * 32, "proof": [],
        "at_step": at_step,
    })  # fmt: skip
    log.info("state after %d steps of round %d delivered (a bisection's probe)", at_step, r)
    return 1


def linger(  # noqa: PLR0917 - answer_requests' arguments and the wait
    store: BoundaryStore,
    ledger: LedgerClient,
    run_id: bytes,
    node: str,
    last: int,
    wait_s: float,
    *,
    poll_s: float = 1.0,
    advance: Advance | None = None,
) -> bool:
    """After a node's last round: answer the ledger's boundary requests until it has judged round
    ``last`` (its outer state is published, so no audit of it asks any more) or ``wait_s`` pass.
    Returns whether the ledger judged it in time. ``advance``: the node's steps, to recompute a
    bisection's probe (:func:`answer_requests`)."""
    store.close()  # every boundary state written before one is served
    until = time.monotonic() + wait_s
    while True:
        try:
            answer_requests(store, ledger, run_id, node, advance)
            if ledger.outer(run_id, last) is not None:
                return True
        except LedgerError as exc:
            log.warning("boundary requests not answered: %s", exc)
        if time.monotonic() >= until:
            log.warning("left before the ledger judged round %d (waited %.0fs): an audit of it "
                        "that asks for a boundary now fails", last, wait_s)  # fmt: skip
            return False
        time.sleep(poll_s)


class BoundaryServer:
    """Answers the ledger's boundary requests every ``poll_s`` in a background thread while the
    node runs: a round's verdict waits for them, and the node may itself wait for that verdict
    (its next join waits for the ledger to commit the earlier rounds), so answering only between
    rounds would hold both until the request's deadline."""

    def __init__(self, store: BoundaryStore, ledger: LedgerClient, run_id: bytes, node: str,
                 *, poll_s: float = 2.0, advance: Advance | None = None) -> None:  # fmt: skip
        self.store, self.ledger, self.run_id, self.node = store, ledger, run_id, node
        self.poll_s = poll_s
        self.advance = advance  # a bisection's probes recomputed (answer_requests)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="boundary-server",
                                            daemon=True)  # fmt: skip
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                answer_requests(self.store, self.ledger, self.run_id, self.node, self.advance)
            except (LedgerError, TrainerError, OSError) as exc:
                log.warning("boundary requests not answered: %s", exc)
