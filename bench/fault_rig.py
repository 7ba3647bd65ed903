"""The fault suite's rig: a real anvil with the contracts and staked nodes, ledger processes
(`coloco ledger serve`), a switchable RPC proxy, a resilient load generator and the checks
(accepted vs stored, commits per round counted from the chain's blocks).

Load reuses the bench's pieces: nodes from :func:`bench.harness.nodes.new_node`, server start-up
from :func:`bench.ledger._start_server`, attestations from :func:`bench.harness.nodes.attestation`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import requests
from sqlalchemy import create_engine, text

from bench.harness.nodes import NodeKey, attestation, gradient_blob, h
from bench.ledger import ADMIN, _start_server
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess, free_port, stop_pid
from protocol.eip712 import Eip712Domain
from protocol.signing import sign_attestation

log = logging.getLogger("bench.faults")


@dataclass
class Rig:
    work: Path
    anvil: AnvilProcess
    dep: Deployment
    dep_path: Path
    nodes: list[NodeKey]
    domain: Eip712Domain
    quick: bool
    pg: Any = None  # bench.harness.postgres.PostgresServer, started on first use

    def load(self, url: str, work: list[Work], **kw: Any) -> Load:
        """A load whose retries give up after 120 s in quick mode (300 s otherwise), so a
        scenario the ledger never answers fails with its figures inside CI's per-test limit."""
        return Load(url, work, deadline_s=120.0 if self.quick else 300.0, **kw)

    def postgres_url(self, name: str) -> str:
        if self.pg is None:
            from bench.harness.postgres import PostgresServer

            self.pg = PostgresServer.start()
        return str(self.pg.create_database(name))

    def ledger(self, name: str, db_url: str | None = None, **env: str) -> LedgerProc:
        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        base = {
            "COLOCO_LEDGER_ENVIRONMENT": "test",
            "COLOCO_LEDGER_RPC_URL": self.anvil.rpc_url,
            "COLOCO_LEDGER_DEPLOYMENT": str(self.dep_path),
            "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY": self.anvil.accounts[1][1],
            "COLOCO_LEDGER_DATABASE_URL": db_url or f"sqlite:///{folder / 'ledger.db'}",
            "COLOCO_LEDGER_BLOB_DIR": str(folder / "blobs"),
            "COLOCO_LEDGER_ADMIN_TOKEN": ADMIN,
            "COLOCO_LEDGER_ROUND_WINDOW": "1000000",
            "COLOCO_LEDGER_ROUND_DEADLINE_S": "3600",
            "COLOCO_LEDGER_INDEXER_POLL_S": "0.2",
            "COLOCO_LEDGER_LIFECYCLE_POLL_S": "0.2",
            "COLOCO_LEDGER_BLOB_MIN_FREE_BYTES": "0",
        }
        proc = LedgerProc(
            folder, {**base, **{f"COLOCO_LEDGER_{k.upper()}": v for k, v in env.items()}}
        )
        proc.start()
        return proc

    def open_run(self, ledger: LedgerProc, label: str) -> str:
        run_id = h(f"faults/{label}/{time.time_ns()}")
        for attempt in range(3):  # idempotent; a 500 here is a known race (see the report)
            r = httpx.post(
                f"{ledger.url}/v1/runs",
                json={"run_id": run_id, "genesis_checkpoint": genesis_of(run_id)},
                headers={"Authorization": f"Bearer {ADMIN}"},
                timeout=120,
            )
            if r.status_code < 500 or attempt == 2:
                break
            log.warning("POST /v1/runs answered %d: %s; again", r.status_code, r.text[:200])
            time.sleep(1)
        r.raise_for_status()
        return run_id

    def join(self, ledger: LedgerProc, run_id: str, rounds: range) -> None:
        """Every node joins each of ``rounds`` (signed RoundJoins): the rounds' members, so a
        round closes as soon as all of them attested; and uploads its pseudo-gradient blobs
        (signed), which scoring needs. Waits out the indexer's lag."""
        from protocol.blob_auth import UploadSigner

        with httpx.Client(base_url=ledger.url, timeout=30) as client:
            for rnd in rounds:
                for i, node in enumerate(self.nodes):
                    digest, data, _ = gradient_blob(_seed(run_id, rnd, i))
                    headers = UploadSigner(node.key, self.domain).headers(digest)
                    r = client.put(f"/v1/blobs/{digest}", content=data, headers=headers)
                    if r.status_code >= 300:
                        raise RuntimeError(f"blob upload refused: {r.status_code} {r.text[:300]}")
        from protocol.join import RoundJoin
        from protocol.signing import sign_digest
        from protocol.types import Address, RoundNumber, RunId

        with httpx.Client(base_url=ledger.url, timeout=30) as client:
            for rnd in rounds:
                for node in self.nodes:
                    j = RoundJoin(
                        RunId(bytes.fromhex(run_id[2:])), RoundNumber(rnd), Address(node.address)
                    )
                    sig = sign_digest(j.digest(self.domain), node.key)
                    body = {"join": j.to_json(), "signature": "0x" + sig.hex()}
                    deadline = time.monotonic() + 120
                    while True:
                        r = client.post("/v1/joins", json=body)
                        if r.status_code < 300:
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"join refused: {r.status_code} {r.text[:300]}")
                        time.sleep(0.2)

    def attestations(self, run_id: str, rounds: range, *, members: bool = True) -> list[Work]:
        """Signed attestations, round by round, every node in each (the round's members)."""
        addresses = [n.address for n in self.nodes]
        out = []
        for rnd in rounds:
            base = genesis_of(run_id) if rnd == 1 else result_of(run_id, rnd - 1)
            for i, node in enumerate(self.nodes):
                pg = gradient_blob(_seed(run_id, rnd, i))[0]
                att = attestation(
                    node,
                    run_id=run_id,
                    round_=rnd,
                    base=base,
                    result=result_of(run_id, rnd),
                    pseudo_gradient=pg,
                    tokens=tokens_of(run_id, i),
                )
                sig = sign_attestation(att, self.domain, node.key)
                payload: dict[str, Any] = {
                    "attestation": att.to_json(),
                    "signature": "0x" + sig.hex(),
                }
                if members:
                    payload["round_members"] = addresses
                out.append(Work("0x" + att.digest(self.domain).hex(), orjson.dumps(payload)))
        return out

    @contextmanager
    def mine_in_background(self, every_s: float = 0.3) -> Iterator[None]:
        """Blocks keep coming (confirmations need them) until the context ends."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                try:
                    self.anvil.mine(1)
                except Exception:  # anvil briefly busy: the next tick mines
                    log.debug("background mining failed", exc_info=True)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def commits_per_round(self, run_id: str, from_block: int) -> dict[int, int]:
        """commitRound transactions of the committer for ``run_id`` mined in canonical blocks
        since ``from_block`` (a reverted duplicate counts: it was sent and paid for)."""
        w3 = self.anvil.w3
        ledger = _ledger_contract(w3, self.dep)
        committer = self.anvil.accounts[1][0].lower()
        target = str(ledger.address).lower()
        counts: dict[int, int] = {}
        for number in range(from_block, w3.eth.block_number + 1):
            block = w3.eth.get_block(number, full_transactions=True)
            txs: list[Any] = list(block["transactions"])
            for tx in txs:
                if (
                    str(tx["from"]).lower() != committer
                    or str(tx.get("to") or "").lower() != target
                ):
                    continue
                fn, args = ledger.decode_function_input(tx["input"])
                if fn.fn_name == "commitRound" and "0x" + bytes(args["runId"]).hex() == run_id:
                    counts[int(args["round"])] = counts.get(int(args["round"]), 0) + 1
        return counts

    def last_committed(self, run_id: str) -> int:
        ledger = _ledger_contract(self.anvil.w3, self.dep)
        return int(ledger.functions.lastRound(bytes.fromhex(run_id[2:])).call())


def _ledger_contract(w3: Any, dep: Deployment) -> Any:
    from protocol.deployment import abi

    return w3.eth.contract(address=dep.address("ContributionLedger"), abi=abi("ContributionLedger"))


def _seed(run_id: str, rnd: int, index: int) -> int:
    return zlib.crc32(f"{run_id}/{rnd}/{index}".encode())


def tokens_of(run_id: str, index: int, inner_steps: int = 50) -> int:
    """A node's tokens in every round of a run: a whole number of inner steps (the judge's work
    rule), different per node and run. Each scenario's ledger starts from an empty database on
    the one chain: with equal splits its first settlement would be the root an earlier scenario
    already committed with a budget, which ContributionLedger refuses (RepeatedRootWithBudget)."""
    return inner_steps * (12 + _seed(run_id, 0, index) % 9)


def genesis_of(run_id: str) -> str:
    return h(f"{run_id}/genesis")


def result_of(run_id: str, rnd: int) -> str:
    return h(f"{run_id}/result/{rnd}")


@dataclass(frozen=True)
class Work:
    digest: str
    body: bytes


class LedgerProc:
    """One `coloco ledger serve` process; kill -9 and restart on the same database."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder = folder
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: Any = None

    @property
    def db_url(self) -> str:
        return self.env["COLOCO_LEDGER_DATABASE_URL"]

    def start(self) -> None:
        self.proc = _start_server(self.env, self.port, None, self.folder / "ledger.log")

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_pid(self.proc.pid)
        self.proc = None

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stored(self, digests: set[str]) -> int:
        """How many of ``digests`` the ledger's database holds (read straight from it)."""
        engine = create_engine(self.db_url.replace("sqlite:///", "sqlite:///", 1))
        try:
            with engine.connect() as conn:
                have = {row[0] for row in conn.execute(text("SELECT digest FROM attestation"))}
        finally:
            engine.dispose()
        return len(digests & have)

    def round_states(self, run_id: str) -> dict[int, str]:
        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT round, state FROM ledger_round WHERE run_id = :r"), {"r": run_id}
                ).all()
        finally:
            engine.dispose()
        return {int(r[0]): str(r[1]) for r in rows}


@dataclass
class Load:
    """Posts every body until it is accepted (202) or refused for good (a 4xx), from threads.

    Connection errors and 5xx are retried after a pause (the ledger or its database may be
    down on purpose). ``accepted`` holds the digests the ledger acknowledged.
    """

    url: str
    work: list[Work]
    threads: int = 8
    rate: float | None = None  # requests/s over all threads; None: as fast as answered
    deadline_s: float = 300.0
    accepted: set[str] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)
    refused_digests: set[str] = field(default_factory=set)
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        start = time.monotonic()
        chunks = [self.work[i :: self.threads] for i in range(self.threads)]
        pace = None if self.rate is None else self.threads / self.rate

        def worker(items: list[Work]) -> None:
            with httpx.Client(base_url=self.url, timeout=10) as client:
                for n, item in enumerate(items):
                    if pace is not None:
                        delay = start + n * pace - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                    self._post(client, item, start)

        threads = [threading.Thread(target=worker, args=(c,)) for c in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _post(self, client: httpx.Client, item: Work, start: float) -> None:
        headers = {"content-type": "application/json"}
        while time.monotonic() - start < self.deadline_s:
            try:
                r = client.post("/v1/attestations", content=item.body, headers=headers)
            except httpx.HTTPError:
                r = None
            if r is not None and r.status_code == 202:
                with self._lock:
                    self.accepted.add(item.digest)
                return
            if r is not None and 400 <= r.status_code < 500 and r.status_code != 429:
                code = r.json().get("error", {}).get("code", "?")
                if code not in ("chain_not_indexed", "unknown_run"):
                    with self._lock:
                        self.refused.append(f"{r.status_code} {code}")
                        self.refused_digests.add(item.digest)
                    return
            with self._lock:
                self.failures += 1
            time.sleep(0.2)

    def background(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        return thread


class SwitchableRpc:
    """A real HTTP proxy to anvil that can be cut (connections closed unanswered) and restored."""

    def __init__(self, upstream: str) -> None:
        self.up = True
        self.refused = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if not outer.up:
                    outer.refused += 1
                    self.close_connection = True
                    return
                answer = requests.post(
                    upstream, data=body, headers={"Content-Type": "application/json"}, timeout=30
                )
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(predicate: Any, timeout_s: float, every_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return bool(predicate())
