"""F7: what one node, or anyone without a key, can hold of the ledger's blob store through uploads
that never finish. Each test opens raw HTTP connections to a real ledger served by uvicorn, sends
part of a body and stalls, as an attacker would, and measures what the server holds (its temp
files) while the honest upload beside it still goes through."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness.nodes import gradient_blob, h
from ledger.core.config import Settings
from ledger.service import Ledger
from protocol.errors import LedgerError
from tests.ledger.conftest import GENESIS, serving
from tests.ledger.helpers import upload_headers

KIB = 1 << 10
MIB = 1 << 20


class StalledUpload:
    """A PUT sent over a raw socket: headers, ``sent`` bytes of body, then nothing (stalled)."""

    def __init__(
        self,
        base: str,
        digest: str,
        headers: dict[str, str],
        sent: int,
        *,
        declared: int | None = None,
    ) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        lines = [f"PUT /v1/blobs/{digest} HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        framing = f"Content-Length: {declared}" if declared else "Transfer-Encoding: chunked"
        lines += [framing, "Content-Type: application/octet-stream", "", ""]
        self.sock.sendall("\r\n".join(lines).encode())
        data = b"\x01" * sent  # not a blob: it would be refused at the end, if there were one
        if declared:
            self.sock.sendall(data)
        else:
            for i in range(0, sent, 64 * KIB):
                piece = data[i : i + 64 * KIB]
                self.sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.answer: tuple[int, dict[str, Any]] | None = None

    def poll(self, timeout: float = 0.01) -> tuple[int, dict[str, Any]] | None:
        """The server's answer, if it has sent one (an upload refused before its body ended)."""
        if self.answer is not None:
            return self.answer
        self.sock.settimeout(timeout)
        raw = b""
        try:
            while b"\r\n\r\n" not in raw:
                got = self.sock.recv(65536)
                if not got:
                    return None
                raw += got
            head, _, rest = raw.partition(b"\r\n\r\n")
            length = int(
                next(
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
            )
            while len(rest) < length:
                rest += self.sock.recv(65536)
        except TimeoutError:
            return None
        self.answer = (int(head.split()[1]), json.loads(rest[:length]))
        return self.answer

    def close(self) -> None:
        self.sock.close()


def held_on_disk(ledger: Ledger) -> list[int]:
    """The sizes of the upload temp files the ledger holds now."""
    sizes = []
    for part in Path(ledger.blobs.tmp).glob("*.part"):
        try:
            sizes.append(part.stat().st_size)
        except FileNotFoundError:  # an upload refused between the listing and the stat
            continue
    return sizes


def settle(
    ledger: Ledger, uploads: list[StalledUpload], each: int, timeout: float = 30
) -> list[int]:
    """Wait until every stalled upload is either answered or held in full; the held sizes."""
    deadline = time.monotonic() + timeout
    while True:
        answered = sum(u.poll() is not None for u in uploads)
        held = held_on_disk(ledger)
        if answered + sum(size >= each for size in held) >= len(uploads):
            return held
        assert time.monotonic() < deadline, f"answered {answered}, held {held}"
        time.sleep(0.05)


@pytest.fixture
def ledger(
    settings_for: Callable[..., Settings], db_url: str, request: pytest.FixtureRequest
) -> Iterator[Ledger]:
    service = Ledger(settings_for(db_url, **getattr(request, "param", {})))
    yield service
    service.stop()


@pytest.fixture
def live(ledger: Ledger) -> Iterator[str]:
    with serving(ledger) as base:
        yield base


def _release(ledger: Ledger, uploads: list[StalledUpload]) -> None:
    for u in uploads:
        u.close()
    deadline = time.monotonic() + 30
    while held_on_disk(ledger):
        assert time.monotonic() < deadline, "dropped uploads still held"
        time.sleep(0.05)


def _honest_put(base: str, node: Any, domain: Any, seed: int) -> int:
    digest, data, _ = gradient_blob(seed)
    with httpx.Client(timeout=30) as c:
        r = c.put(
            f"{base}/v1/blobs/{digest}", content=data, headers=upload_headers(node, domain, digest)
        )
    return r.status_code


@pytest.mark.parametrize(
    "ledger", [{"blob_quota_bytes": MIB, "blob_uploads_per_node": 64}], indirect=True
)
def test_uploads_in_flight_cannot_hold_more_than_the_node_quota(
    live: str, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F7: six chunked uploads begun at once, one signature reused, each stalled after 512 KiB:
    before, each saw the quota free (6 x 512 KiB held against a 1 MiB quota); now the bytes in
    flight count against it."""
    digest = h("never finished")
    signed = upload_headers(nodes[0], domain, digest)  # one signature, reused for all six
    uploads = [StalledUpload(live, digest, signed, 512 * KIB) for _ in range(6)]
    try:
        held = settle(ledger, uploads, 512 * KIB)
        assert sum(held) <= MIB, f"node 0 holds {sum(held)} bytes with a {MIB}-byte quota"
        refused = [u.poll() for u in uploads if u.poll() is not None]
        assert refused and {a[1]["error"]["code"] for a in refused if a} == {"blob_quota_exceeded"}
        assert all("in flight" in a[1]["error"]["message"] for a in refused if a)
        assert _honest_put(live, nodes[1], domain, 71) == 201  # another node is not held up
    finally:
        _release(ledger, uploads)
    assert _honest_put(live, nodes[0], domain, 72) == 201  # its quota is back


@pytest.mark.parametrize(
    "ledger", [{"blob_uploads_per_node": 2, "blob_uploads_total": 3}], indirect=True
)
def test_a_node_cannot_hold_more_than_its_upload_slots(
    live: str, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F7: open uploads are capped per node and in total (a refusal, 429, names the limit)."""
    digest = h("slot holder")
    uploads: list[StalledUpload] = []
    try:
        for n in (nodes[0], nodes[0], nodes[0], nodes[1], nodes[1]):  # one after the other
            signed = upload_headers(n, domain, digest)
            uploads.append(StalledUpload(live, digest, signed, KIB, declared=16 * KIB))
            held = settle(ledger, uploads, 0)  # 1 KiB may sit in a write buffer: count files
        answers = [u.poll() for u in uploads]
        assert len(held) == 3, held
        assert answers[:2] == [None, None] and answers[3] is None
        for refused, limit in ((answers[2], "PER_NODE"), (answers[4], "TOTAL")):
            assert refused is not None and refused[0] == 429, answers
            assert refused[1]["error"]["code"] == "too_many_uploads"
            assert f"COLOCO_LEDGER_BLOB_UPLOADS_{limit}" in refused[1]["error"]["message"]
    finally:
        _release(ledger, uploads)
    assert _honest_put(live, nodes[0], domain, 73) == 201


@pytest.mark.parametrize("ledger", [{"blob_upload_deadline_s": 1.0}], indirect=True)
def test_a_stalled_upload_cannot_outlive_the_body_deadline(
    live: str, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F7: a body that stops arriving is refused (408) at the deadline and its slot and temp file
    are given back; before, it was held until the client went away."""
    digest = h("slow loris")
    upload = StalledUpload(
        live, digest, upload_headers(nodes[0], domain, digest), KIB, declared=64 * KIB
    )
    try:
        answer = upload.poll(timeout=10)
        assert answer is not None, "no answer 10 s after a 1 s deadline"
        assert answer[0] == 408 and answer[1]["error"]["code"] == "upload_timeout"
        assert "BLOB_UPLOAD_DEADLINE_S" in answer[1]["error"]["message"]
        assert held_on_disk(ledger) == []
    finally:
        _release(ledger, [upload])


@pytest.mark.parametrize("ledger", [{"blob_anonymous_bytes": MIB}], indirect=True)
def test_unsigned_uploads_cannot_hold_more_than_their_shared_budget(
    live: str, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F7: a checkpoint a run names but the ledger lacks (here the genesis) may be brought by
    anyone, unsigned: six such uploads of 512 KiB held 3 MiB with no quota; now all unsigned
    uploads share one budget in flight, and a signed one is still served."""
    assert ledger.blobs.wanted(GENESIS)
    uploads = [StalledUpload(live, GENESIS, {}, 512 * KIB) for _ in range(6)]
    try:
        held = settle(ledger, uploads, 512 * KIB)
        assert sum(held) <= MIB, f"unsigned uploads hold {sum(held)} bytes, budget {MIB}"
        refused = [a for a in (u.poll() for u in uploads) if a is not None]
        assert refused and all(a[1]["error"]["code"] == "too_many_uploads" for a in refused)
        assert "COLOCO_LEDGER_BLOB_ANONYMOUS_BYTES" in refused[0][1]["error"]["message"]
        assert _honest_put(live, nodes[0], domain, 74) == 201
    finally:
        _release(ledger, uploads)


def test_a_blob_finished_while_others_are_in_flight_counts_at_once(
    ledger: Ledger, nodes: Any
) -> None:
    """F7: a node's stored bytes are read when its first upload begins and kept while it has one
    in flight; a blob it finishes meanwhile must count at once, or a node keeping one upload
    open would never see its quota fill."""
    ledger.prepare_database()
    store, node = ledger.blobs, nodes[0].address
    first, data1, _ = gradient_blob(81)
    second, data2, _ = gradient_blob(82)
    store.holds.limits = replace(store.holds.limits, quota_bytes=len(data1) + len(data2) - 1)
    kept_open = store.receive(h("kept open"), sender=node, pays=True)
    try:
        done = store.receive(first, sender=node, pays=True)
        done.write(data1)
        assert done.finish() == len(data1)
        late = store.receive(second, sender=node, pays=True)
        with pytest.raises(LedgerError) as info:
            late.write(data2)
        assert info.value.code == "blob_quota_exceeded"
    finally:
        kept_open.abort()
    assert store.holds.in_flight == 0 and held_on_disk(ledger) == []


@pytest.mark.parametrize("ledger", [{"blob_quota_bytes": MIB}], indirect=True)
def test_a_declared_length_over_the_quota_is_refused_before_its_body(
    live: str, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    """F7: an upload declaring more than its node's quota (Content-Length) is refused at once,
    before any byte is held: the reservation covers what is declared, not only what arrived."""
    digest = h("declared big")
    upload = StalledUpload(
        live, digest, upload_headers(nodes[0], domain, digest), 0, declared=2 * MIB
    )
    try:
        answer = upload.poll(timeout=10)
        assert answer is not None and answer[0] == 413, answer
        assert answer[1]["error"]["code"] == "blob_quota_exceeded"
    finally:
        _release(ledger, [upload])
