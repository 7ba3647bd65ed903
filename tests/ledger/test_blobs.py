"""Blob uploads: streamed, unique temp files, durable rename, signed by registered nodes, quotas,
a full disk, garbage collection. Real HTTP (uvicorn on a port) where concurrency matters."""

from __future__ import annotations

import subprocess
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
import uvicorn
from sqlmodel import Session, select

from bench.harness.nodes import attestation, gradient_blob, h
from ledger.core.blobstore import BlobStore
from ledger.core.models import Blob, RoundState, utcnow
from ledger.main import create_app
from ledger.service import Ledger
from protocol.blob_auth import UploadSigner
from protocol.blobs import encode_blob
from protocol.devnet import free_port
from protocol.errors import LedgerError
from protocol.hashing import hash_state_dict
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body, upload_headers


def big_blob(mib: int, seed: int = 0) -> tuple[str, bytes]:
    gen = torch.Generator().manual_seed(seed)
    sd = {"w": torch.randn(mib * (1 << 18), generator=gen)}
    return "0x" + hash_state_dict(sd).hex(), encode_blob(sd)


@pytest.fixture
def live(ledger: Ledger) -> Iterator[str]:
    """The ledger app served by a real uvicorn on a free port, in a thread."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(ledger=ledger), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _leftovers(store: BlobStore) -> list[Path]:
    return list(store.tmp.iterdir())


def test_store_put_from_many_threads_at_once(ledger: Ledger) -> None:
    ledger.prepare_database()
    digest, data = big_blob(2)
    for _ in range(3):
        with ThreadPoolExecutor(8) as pool:
            sizes = list(pool.map(lambda _: ledger.blobs.put(digest, data), range(8)))
        assert sizes == [len(data)] * 8
        assert ledger.blobs.path(digest).read_bytes() == data
        assert _leftovers(ledger.blobs) == []
        with Session(ledger.engine) as s:
            assert len(s.exec(select(Blob)).all()) == 1
        ledger.blobs.path(digest).unlink()
        with Session(ledger.engine) as s:
            s.delete(s.get(Blob, digest))
            s.commit()


def test_concurrent_http_puts_of_one_blob(
    live: str, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    digest, data = big_blob(8)
    signed = [upload_headers(n, domain, digest) for n in nodes]
    limits = ledger.blobs.holds.limits  # 24 at once: more than a node's default upload slots
    ledger.blobs.holds.limits = replace(limits, per_node=24, total=24)

    def put(i: int) -> int:
        with httpx.Client(timeout=60) as c:
            return c.put(
                f"{live}/v1/blobs/{digest}", content=data, headers=signed[i % 3]
            ).status_code

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(put, range(24)))
    assert set(codes) <= {200, 201} and len(codes) == 24, codes
    with httpx.Client(timeout=60) as c:
        got = c.get(f"{live}/v1/blobs/{digest}")
    assert got.status_code == 200 and got.content == data
    assert _leftovers(ledger.blobs) == []


def test_upload_memory_stays_bounded(
    live: str, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    digest, data = big_blob(48)
    view = memoryview(data)
    chunks = (view[i : i + (1 << 16)] for i in range(0, len(data), 1 << 16))
    tracemalloc.start()
    try:
        with httpx.Client(timeout=120) as c:
            r = c.put(
                f"{live}/v1/blobs/{digest}",
                content=chunks,
                headers=upload_headers(nodes[0], domain, digest),
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status_code == 201, r.text
    assert peak < len(data) // 6, f"peak {peak} bytes for a {len(data)}-byte upload"
    assert ledger.blobs.path(digest).stat().st_size == len(data)


def test_who_may_upload(
    client: Any, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    digest, data, _ = gradient_blob(5)
    url = f"/v1/blobs/{digest}"
    r = client.put(url, content=data)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    stranger = UploadSigner(b"\x42" * 32, domain).headers(digest)
    r = client.put(url, content=data, headers=stranger)
    assert r.status_code == 403 and r.json()["error"]["code"] == "unregistered_node"
    forged = {**upload_headers(nodes[1], domain, digest), "x-coloco-node": nodes[0].address}
    r = client.put(url, content=data, headers=forged)
    assert r.status_code == 403 and r.json()["error"]["code"] == "signer_mismatch"
    other_blob = upload_headers(nodes[0], domain, h("another blob"))
    r = client.put(url, content=data, headers={**other_blob})
    assert r.status_code == 403  # the signature covers the blob hash
    expired = UploadSigner(nodes[0].key, domain, validity_s=1).headers(digest, now=time.time() - 10)
    r = client.put(url, content=data, headers=expired)
    assert r.status_code == 401 and "expired" in r.json()["error"]["message"]
    assert not ledger.blobs.exists(digest)
    r = client.put(url, content=data, headers=upload_headers(nodes[0], domain, digest))
    assert r.status_code == 201
    with Session(ledger.engine) as s:
        assert s.get(Blob, digest).uploader == nodes[0].address
    # a checkpoint a run already names: anyone may bring it (the hash fixes the content)
    gsd = {"g": torch.arange(4.0)}
    gen_hash = "0x" + hash_state_dict(gsd).hex()
    with Session(ledger.engine) as s:
        rnd = s.exec(select(RoundState)).first()
        rnd.checkpoint = gen_hash
        s.add(rnd)
        s.commit()
    assert client.put(f"/v1/blobs/{gen_hash}", content=encode_blob(gsd)).status_code == 201
    assert client.get(f"/v1/blobs/{gen_hash}").content == encode_blob(gsd)


def test_quota_per_node(
    ledger: Ledger, client: Any, started_run: str, nodes: Any, domain: Any
) -> None:
    ledger.blobs.holds.limits = replace(ledger.blobs.holds.limits, quota_bytes=600)
    first, data1, _ = gradient_blob(21)
    second, data2, _ = gradient_blob(22)
    assert len(data1) < 600 < len(data1) + len(data2)
    ok = client.put(
        f"/v1/blobs/{first}", content=data1, headers=upload_headers(nodes[0], domain, first)
    )
    assert ok.status_code == 201
    r = client.put(
        f"/v1/blobs/{second}", content=data2, headers=upload_headers(nodes[0], domain, second)
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "blob_quota_exceeded"
    r = client.put(
        f"/v1/blobs/{second}", content=data2, headers=upload_headers(nodes[1], domain, second)
    )
    assert r.status_code == 201  # another node's quota
    assert _leftovers(ledger.blobs) == []


def test_low_disk_space_refused_clearly(ledger: Ledger) -> None:
    ledger.prepare_database()
    digest, data, _ = gradient_blob(9)
    ledger.blobs.min_free_bytes = 1 << 62
    with pytest.raises(LedgerError) as info:
        ledger.blobs.put(digest, data)
    assert info.value.code == "blob_disk_full" and "nothing was stored" in info.value.message
    assert not ledger.blobs.exists(digest) and _leftovers(ledger.blobs) == []


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_is_clear_and_leaves_nothing_corrupt(
    tiny_disk: Path, settings_for: Any, db_url: str, nodes: Any, domain: Any
) -> None:
    service = Ledger(settings_for(db_url, blob_dir=tiny_disk, blob_min_free_bytes=0))
    service.prepare_database()
    try:
        small, small_data, _ = gradient_blob(3)
        assert service.blobs.put(small, small_data) == len(small_data)
        digest, data = big_blob(2)
        with pytest.raises(LedgerError) as info:
            service.blobs.put(digest, data)
        assert info.value.code == "blob_disk_full"
        assert "disk is full" in info.value.message
        assert not service.blobs.exists(digest) and _leftovers(service.blobs) == []
        with Session(service.engine) as s:
            assert {b.hash for b in s.exec(select(Blob))} == {small}
        assert service.blobs.path(small).read_bytes() == small_data  # the old blob intact
        assert service.blobs.put(*gradient_blob(4)[:2]) > 0  # space came back
    finally:
        service.stop()


def test_garbage_collection_keeps_what_rounds_need(
    client: Any, ledger: Ledger, started_run: str, nodes: Any, domain: Any
) -> None:
    scored, data, _ = gradient_blob(31)
    pending, data2, _ = gradient_blob(32)
    orphan, data3, _ = gradient_blob(33)
    for digest, blob, node in (
        (scored, data, nodes[0]),
        (pending, data2, nodes[1]),
        (orphan, data3, nodes[2]),
    ):
        r = client.put(
            f"/v1/blobs/{digest}", content=blob, headers=upload_headers(node, domain, digest)
        )
        assert r.status_code == 201
    for node, digest, round_ in ((nodes[0], scored, 1), (nodes[1], pending, 2)):
        att = attestation(
            node,
            run_id=started_run,
            round_=round_,
            base=GENESIS,
            result=h("r"),
            pseudo_gradient=digest,
        )
        r = client.post("/v1/attestations", json=body(att, node.key, domain, [node.address]))
        assert r.status_code == 202, r.text
    with Session(ledger.engine) as s:
        for rnd in s.exec(select(RoundState).where(RoundState.round == 1)):
            rnd.state = "scored"
            s.add(rnd)
        s.commit()
    assert ledger.blobs.collect_garbage(grace_s=3600) == []  # all younger than the grace
    gone = ledger.blobs.collect_garbage(grace_s=60, now=utcnow() + timedelta(seconds=120))
    assert sorted(gone) == sorted([scored, orphan])
    assert not ledger.blobs.exists(scored) and not ledger.blobs.exists(orphan)
    assert ledger.blobs.exists(pending)
    assert ledger.blobs.usage(nodes[0].address) == 0  # the quota is given back


def test_blob_visibility_reads_an_index_not_every_attestation(sqlite_url: str) -> None:
    """A GET of a blob asks which attestations name it as their pseudo-gradient
    (BlobStore.hidden): through the migrated schema's index, not a scan of the whole table."""
    from sqlalchemy import create_engine, text

    from ledger.core import db

    db.upgrade(sqlite_url)
    engine = create_engine(sqlite_url)
    with engine.connect() as conn:
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                text(
                    "EXPLAIN QUERY PLAN SELECT run_id, round FROM attestation "
                    "WHERE pseudo_gradient = :h"
                ),
                {"h": "0x" + "ab" * 32},
            )
        )
    engine.dispose()
    assert "USING INDEX ix_attestation_pseudo_gradient" in plan, plan
