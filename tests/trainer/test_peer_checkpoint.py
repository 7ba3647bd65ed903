"""Checkpoints peer to peer: real server processes, one of them dishonest, a real fetch.

Each peer is a separate Python process running
:class:`trainer.network.peer_checkpoint.CheckpointServer` on a real socket. A dishonest peer serves
the blob with one chunk altered (or a wrong digest list, or a chunk of the wrong length) under the
honest manifest: the fetcher must drop it, take that chunk from another peer and return exactly the
honest blob.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from protocol.errors import CheckpointError
from trainer.network.peer_checkpoint import MIN_CHUNK_BYTES, Manifest, fetch

CHUNK = MIN_CHUNK_BYTES
SIZE = 10 * CHUNK + 123  # 11 chunks, the last one short
ROUND = 7

_SERVER = textwrap.dedent(
    """
    import hashlib, sys
    from trainer.network.peer_checkpoint import CheckpointServer, Manifest
    size, chunk, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    blob = bytearray(hashlib.shake_256(b"blob").digest(size))
    manifest, digests = Manifest.of(bytes(blob), bytes(32), chunk)
    if mode == "flip":      # one chunk altered, everything else honest
        blob[3 * chunk + 5] ^= 0xFF
    elif mode == "digests":  # a digest list that does not match the signed root
        digests = bytes(32) + digests[32:]
    elif mode == "long":     # the last chunk one byte too long (announced honestly)
        blob = blob + b"x"
    server = CheckpointServer("127.0.0.1", 0)
    if mode == "long":
        from trainer.network.peer_checkpoint import _Offer
        server._offers[7] = _Offer(bytes(blob), digests, Manifest(manifest.weights_hash,
                                   size + 1, chunk, manifest.chunks_root))
    else:
        server.offer(7, bytes(blob), digests, manifest)
    print(server.endpoint, flush=True)
    sys.stdin.read()  # serve until the test closes our stdin
    print(server.bytes_served, flush=True)
    """
)


def _honest() -> tuple[bytes, Manifest]:
    blob = hashlib.shake_256(b"blob").digest(SIZE)
    return blob, Manifest.of(blob, bytes(32), CHUNK)[0]


class Peers:
    def __init__(self, modes: list[str]) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", _SERVER, str(SIZE), str(CHUNK), mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for mode in modes
        ]
        self.endpoints = [p.stdout.readline().strip() for p in self.procs if p.stdout]

    def served(self) -> list[int]:
        """Bytes each server sent (closes them)."""
        out = []
        for p in self.procs:
            stdout, _ = p.communicate(timeout=30)
            out.append(int(stdout.strip() or 0))
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def peers() -> Iterator[type[Peers]]:
    started: list[Peers] = []

    class Tracked(Peers):
        def __init__(self, modes: list[str]) -> None:
            super().__init__(modes)
            started.append(self)

    yield Tracked
    for p in started:
        p.close()


def test_fetches_from_several_peers_at_once_and_checks_every_chunk(peers: type[Peers]) -> None:
    blob, manifest = _honest()
    group = peers(["ok", "ok", "ok"])
    got, faults = fetch(ROUND, manifest, group.endpoints, per_peer=2)
    assert got == blob and faults == []
    served = group.served()
    assert sum(1 for s in served if s > 0) >= 2, f"chunks came from one peer only: {served}"
    # digests once (from the first peer), each chunk exactly once: no byte fetched twice
    assert sum(served) == SIZE + 32 * manifest.n_chunks


def test_a_peer_serving_a_corrupted_chunk_is_dropped_and_the_chunk_refetched(
    peers: type[Peers],
) -> None:
    blob, manifest = _honest()
    group = peers(["flip", "ok"])
    # the dishonest peer first, alone for a while: it is asked for chunk 3 unless the honest
    # peer's two workers get there first, so run until it was caught (bounded)
    for _ in range(5):
        got, faults = fetch(ROUND, manifest, group.endpoints, per_peer=4)
        assert got == blob
        if faults:
            break
    assert faults, "the corrupted chunk was never requested from the dishonest peer"
    assert {f.peer for f in faults} == {group.endpoints[0]}
    assert faults[0].chunk == 3 and "digest" in faults[0].reason


def test_a_wrong_digest_list_is_refused_before_any_chunk(peers: type[Peers]) -> None:
    blob, manifest = _honest()
    group = peers(["digests", "ok"])
    got, faults = fetch(ROUND, manifest, group.endpoints)
    assert got == blob
    assert [(f.peer, f.chunk) for f in faults] == [(group.endpoints[0], -1)]
    assert "chunks_root" in faults[0].reason
    served = group.served()
    assert served[0] == 32 * manifest.n_chunks, "the refused peer got no chunk request"


def test_a_chunk_of_the_wrong_length_is_refused(peers: type[Peers]) -> None:
    _, manifest = _honest()
    group = peers(["long"])
    with pytest.raises(CheckpointError, match="could not be fetched"):
        fetch(ROUND, manifest, group.endpoints)


def test_no_honest_peer_is_a_clear_error(peers: type[Peers]) -> None:
    _, manifest = _honest()
    group = peers(["flip"])
    with pytest.raises(CheckpointError, match="could not be fetched from any of 1 peers"):
        fetch(ROUND, manifest, group.endpoints)
    with pytest.raises(CheckpointError, match="no usable peer"):
        fetch(ROUND, manifest, ["nonsense", "host:port"])  # signed, but no address
    blob, faults = fetch(ROUND, _honest()[1], ["nonsense", *peers(["ok"]).endpoints])
    assert blob == _honest()[0] and [f.peer for f in faults] == ["nonsense"]
    other = Manifest(manifest.weights_hash, manifest.size, manifest.chunk_bytes, bytes(32))
    with pytest.raises(CheckpointError, match="digests"):
        fetch(ROUND, other, group.endpoints)  # a root this peer does not serve: 404


def test_a_manifest_out_of_bounds_is_refused() -> None:
    _, manifest = _honest()
    body = manifest.body()
    assert Manifest.from_body(body) == manifest
    for bad in ({"size": 0}, {"size": 1 << 40}, {"chunk_bytes": 1}, {"chunk_bytes": 1 << 30},
                {"chunks_root": "00"}, {"hash": "zz"}):  # fmt: skip
        with pytest.raises(CheckpointError):
            Manifest.from_body(body | bad)


def test_every_process_encodes_a_checkpoint_to_the_same_bytes() -> None:
    """safetensors writes its metadata in hash-map order, which changes between processes; the
    members' blobs must be byte-identical for one signed manifest to describe them all."""
    code = textwrap.dedent(
        """
        import hashlib, torch
        from reference.checkpoint import RoundCheckpoint
        w = {"a": torch.arange(10.0), "b": torch.ones(3)}
        blob = RoundCheckpoint(3, w, {k: v * 2 for k, v in w.items()}, b"\\x01" * 32).to_bytes()
        assert RoundCheckpoint.from_bytes(blob).momentum["b"].sum() == 6
        print(hashlib.sha256(blob).hexdigest())
        """
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(6)
    }
    assert len(digests) == 1, digests
