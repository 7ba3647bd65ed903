"""Byte-level corpora and the deterministic per-node, per-round data shard.

A :class:`Corpus` is a tuple of data sources (index i = ``TrainingConfig.dataMixtureBps[i]``),
each with a train and a held-out eval stream of bytes. Files go to eval by the hash of their
relative path, so the split is the same on every machine. Every corpus carries the
:class:`~reference.manifest.DataManifest` of the files it was built from: its root names the data
(``TrainingConfig.dataRoot``).

The default corpus is a pinned snapshot of Python's standard library source, shipped in the
package (``reference/corpus/stdlib.zip``, PSF licence, built by ``tools/build_corpus.py``): source
0 is the library, source 1 part of its test suite. It yields the same bytes whatever Python runs
coloco (the installed stdlib differs: 1,790 files in one 3.11, 668 in Debian's), so honest nodes on
different Pythons train on the same rows and the ledger scores them on those rows.

A :class:`ShardSpec` names what one node trains on in one round; its :attr:`ShardSpec.id` (sha256
of its fields) is the attestation's ``dataShard``. :meth:`Corpus.shard_rows` turns a spec into
token rows deterministically, so the ledger rebuilds the very same rows to score the node.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import sysconfig
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor

from protocol.errors import DataError
from reference.manifest import DataManifest, check_root

log = logging.getLogger(__name__)

EVAL_PERCENT = 5
EVAL_ROWS = 64
EVAL_SEED = 7
"""The one "eval loss": held-out rows ``Corpus.eval_rows(seq_len, EVAL_ROWS, seed=EVAL_SEED)``
scored by ``reference.model.evaluate``. The nodes (their reports, the demo's summary), the ledger's
dashboard and `coloco model eval` all use these, so one checkpoint shows one loss."""
"""Share of files (by path hash) held out for evaluation."""

_DOC_SEPARATOR = b"\x00"
_SUFFIXES = (".txt", ".jsonl", ".parquet")
_SHARD_DOMAIN = b"coloco.shard.v1"
DEFAULT_CORPUS = Path(__file__).parent / "corpus" / "stdlib.zip"
"""The shipped default corpus: the pinned standard-library snapshot (tools/build_corpus.py)."""
TESTS_BYTES = 4_000_000
"""The snapshot keeps the test files (in path order) until this many bytes: a few MB shipped."""


@dataclass(frozen=True)
class DataSource:
    name: str
    train: Tensor  # uint8, 1-D
    eval: Tensor  # uint8, 1-D


@dataclass(frozen=True)
class ShardSpec:
    """One node's data for one round: ``n_tokens`` bytes drawn per the mixture (bps per source)."""

    run_id: bytes
    round: int
    node: str
    n_tokens: int
    mixture: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, bytes) or len(self.run_id) != 32:
            raise DataError(f"ShardSpec.run_id must be 32 bytes, got {self.run_id!r}")
        if self.round < 0 or self.round >= 2**64:
            raise DataError(f"ShardSpec.round must be a uint64, got {self.round}")
        node = self.node
        if not (isinstance(node, str) and node.startswith("0x") and len(node) == 42):
            raise DataError(f"ShardSpec.node must be a 0x-prefixed 20-byte address, got {node!r}")
        try:
            bytes.fromhex(node[2:])
        except ValueError:
            raise DataError(f"ShardSpec.node is not hex: {node!r}") from None
        if self.n_tokens <= 0:
            raise DataError(f"ShardSpec.n_tokens must be positive, got {self.n_tokens}")
        if not self.mixture or any(b < 0 or b > 10_000 for b in self.mixture):
            raise DataError(f"ShardSpec.mixture must be bps in [0, 10000], got {self.mixture}")
        if sum(self.mixture) != 10_000:
            raise DataError(
                f"ShardSpec.mixture must sum to 10000 bps, got {sum(self.mixture)} "
                f"({list(self.mixture)}): fix TrainingConfig.dataMixtureBps"
            )

    @classmethod
    def for_node(
        cls,
        run_id: bytes,
        round: int,
        node_address: str,
        n_tokens: int,
        mixture: tuple[int, ...] | list[int],
    ) -> ShardSpec:
        return cls(run_id, int(round), node_address, int(n_tokens), tuple(int(b) for b in mixture))

    @property
    def id(self) -> bytes:
        """bytes32 identity (the attestation's ``dataShard``)."""
        h = hashlib.sha256(_SHARD_DOMAIN)
        h.update(self.run_id)
        h.update(self.round.to_bytes(8, "big"))
        h.update(bytes.fromhex(self.node[2:].lower()))
        h.update(self.n_tokens.to_bytes(8, "big"))
        h.update(len(self.mixture).to_bytes(2, "big"))
        for bps in self.mixture:
            h.update(bps.to_bytes(2, "big"))
        return h.digest()

    def rows_per_source(self, seq_len: int) -> list[int]:
        """How many ``seq_len`` rows each source contributes (largest remainder rounding)."""
        if self.n_tokens % seq_len:
            raise DataError(
                f"shard of {self.n_tokens} tokens is not a whole number of {seq_len}-token rows"
            )
        n_rows = self.n_tokens // seq_len
        exact = [n_rows * bps / 10_000 for bps in self.mixture]
        rows = [int(x) for x in exact]
        order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - rows[i]), i))
        for i in order[: n_rows - sum(rows)]:
            rows[i] += 1
        return rows


class Corpus:
    """Byte streams per data source, split into train and eval."""

    def __init__(
        self, sources: list[DataSource], *, name: str, manifest: DataManifest | None = None
    ) -> None:
        if not sources:
            raise DataError(f"corpus {name!r} has no data sources")
        self.sources = tuple(sources)
        self.name = name
        self.manifest = manifest or DataManifest(())
        """The files this corpus was built from; its ``root`` names the data."""

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s.name}: {s.train.numel()}+{s.eval.numel()}" for s in self.sources)
        return f"Corpus({self.name!r}, {sizes})"

    @property
    def root(self) -> bytes:
        """The data's bytes32 name (:attr:`DataManifest.root`)."""
        return self.manifest.root

    @classmethod
    def stdlib(cls) -> Corpus:
        """The default corpus: the shipped, pinned standard-library snapshot (same bytes on
        every Python): source 0 library, source 1 tests."""
        return _default_corpus(str(DEFAULT_CORPUS))

    @classmethod
    def from_stdlib(cls, root: str | Path | None = None) -> Corpus:
        """A snapshot of the standard library at ``root`` (default: this Python's), by the
        default corpus' rule. Only ``tools/build_corpus.py`` and tests use it: its bytes depend
        on the Python installed."""
        folder = Path(root or sysconfig.get_paths()["stdlib"])
        return _stdlib_corpus(stdlib_files(folder), name=f"stdlib:{folder}")

    @classmethod
    def from_folder(cls, path: str | Path) -> Corpus:
        """``.txt``/``.jsonl``/``.parquet`` files; each subfolder is a source (else one source)."""
        root = Path(path)
        if not root.is_dir():
            raise DataError(f"data path {root} is not a folder: pass a folder of .txt/.jsonl files")
        subdirs = sorted(p for p in root.iterdir() if p.is_dir() and _data_files(p))
        groups = [(d.name, _data_files(d)) for d in subdirs] or [(root.name, _data_files(root))]
        if not groups[0][1]:
            raise DataError(f"no .txt, .jsonl or .parquet files under {root}")
        read = [
            (name, [(f.relative_to(root).as_posix(), f.read_bytes()) for f in files])
            for name, files in groups
        ]
        sources = [_build_source(name, items) for name, items in read]
        manifest = DataManifest.of(item for _, items in read for item in items)
        return cls(sources, name=str(root), manifest=manifest)

    @classmethod
    def load(cls, path: str | Path | None) -> Corpus:
        """``None`` or ``"stdlib"`` for the default corpus, else a folder."""
        if path is None or str(path) == "stdlib":
            return cls.stdlib()
        return cls.from_folder(path)

    def _check_mixture(self, mixture: tuple[int, ...]) -> None:
        if len(mixture) > len(self.sources):
            raise DataError(
                f"data mixture has {len(mixture)} weights but corpus {self.name!r} has only "
                f"{len(self.sources)} sources ({[s.name for s in self.sources]})"
            )

    def shard_rows(self, spec: ShardSpec, seq_len: int, limit: int | None = None) -> Tensor:
        """The shard's token rows, int64 ``[n_tokens // seq_len, seq_len + 1]``, deterministic;
        with ``limit``, only its first ``limit`` rows (the same rows), gathered without building
        the others: a scorer reading a batch of a large declared shard holds that batch, plus
        24 bytes of offsets a row, never the whole shard."""
        self._check_mixture(spec.mixture)
        seed = int.from_bytes(spec.id[:8], "big") & (2**63 - 1)
        sources: list[Tensor] = []
        offsets: list[Tensor] = []
        for i, n in enumerate(spec.rows_per_source(seq_len)):
            if n:
                stream = self.sources[i].train
                offsets.append(_row_offsets(stream, n, seq_len, seed + i, self, i))
                sources.append(torch.full((n,), len(sources), dtype=torch.int64))
        where, start = torch.cat(sources), torch.cat(offsets)
        perm = torch.randperm(start.shape[0], generator=torch.Generator().manual_seed(seed))
        if limit is not None:
            perm = perm[: max(limit, 0)]
        where, start = where[perm], start[perm]
        rows = torch.empty((perm.shape[0], seq_len + 1), dtype=torch.int64)
        used = [i for i, n in enumerate(spec.rows_per_source(seq_len)) if n]
        for k, i in enumerate(used):
            pick = where == k
            index = start[pick][:, None] + torch.arange(seq_len + 1)
            rows[pick] = self.sources[i].train[index].long()
        return rows

    def eval_rows(self, seq_len: int, n_rows: int = EVAL_ROWS, *, seed: int = EVAL_SEED) -> Tensor:
        """Held-out rows, split evenly over the sources that have eval data."""
        sources = [s for s in self.sources if s.eval.numel() > seq_len + 1]
        if not sources:
            raise DataError(f"corpus {self.name!r} has no held-out data longer than {seq_len}")
        counts = [n_rows // len(sources) + (i < n_rows % len(sources)) for i in range(len(sources))]
        parts = [
            _sample_rows(s.eval, n, seq_len, seed + i, self, i)
            for i, (s, n) in enumerate(zip(sources, counts, strict=True))
            if n
        ]
        return torch.cat(parts)

    def random_rows(self, seq_len: int, n_rows: int, *, seed: int) -> Tensor:
        """Train rows from all sources uniformly at random (the scoring baseline)."""
        mixture = [10_000 // len(self.sources)] * len(self.sources)
        mixture[0] += 10_000 - sum(mixture)
        spec = ShardSpec(bytes(32), 0, "0x" + seed.to_bytes(20, "big").hex(), n_rows * seq_len,
                         tuple(mixture))  # fmt: skip
        return self.shard_rows(spec, seq_len)


def check_data(corpus: Corpus, run_root: bytes, *, what: str) -> None:
    """Refuse (:class:`~reference.manifest.DataMismatch`) a corpus that is not the run's data
    (root ``run_root``); when the run pins the default corpus, the message names the files that
    differ from it."""
    if corpus.root == run_root:
        return
    default = Corpus.stdlib()
    expected = default.manifest if default.root == run_root else None
    check_root(corpus.manifest, run_root, what=f"{what} ({corpus.name})", expected=expected)


def _row_offsets(  # noqa: PLR0917
    stream: Tensor, n: int, seq_len: int, seed: int, corpus: Corpus, i: int
) -> Tensor:
    """Where each of ``n`` rows of one source starts in its stream (seeded)."""
    span = stream.numel() - seq_len - 1
    if span <= 0:
        raise DataError(
            f"source {i} of corpus {corpus.name!r} has {stream.numel()} bytes, fewer than one "
            f"row of {seq_len + 1}: add data or give it weight 0 in the mixture"
        )
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, span, (n,), generator=gen)


def _sample_rows(  # noqa: PLR0917
    stream: Tensor, n: int, seq_len: int, seed: int, corpus: Corpus, i: int
) -> Tensor:
    offsets = _row_offsets(stream, n, seq_len, seed, corpus, i)
    index = offsets[:, None] + torch.arange(seq_len + 1)
    return stream[index].long()


def _is_eval(rel: str) -> bool:
    return hashlib.sha256(rel.encode()).digest()[0] * 100 < EVAL_PERCENT * 256


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in _SUFFIXES and p.is_file())


def _read_texts(path: str, data: bytes) -> list[bytes]:
    """The documents of one file (``path`` for its suffix and in errors)."""
    suffix = Path(path).suffix
    if suffix not in (".jsonl", ".parquet"):  # .txt, .py: raw bytes
        return [data]
    if suffix == ".jsonl":
        out = []
        for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise DataError(
                    f'{path}:{n}: each line must be a JSON object with "text"'
                ) from None
            out.append(str(text).encode())
        return out
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise DataError(
            f"{path} is parquet but pyarrow is not installed: `pip install pyarrow` "
            "or convert it to .jsonl"
        ) from None
    table = pq.read_table(io.BytesIO(data), columns=["text"])
    return [str(t).encode() for t in table.column("text").to_pylist()]


def _to_tensor(chunks: list[bytes]) -> Tensor:
    data = _DOC_SEPARATOR.join(chunks)
    return (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if data
        else torch.empty(0, dtype=torch.uint8)
    )


def _build_source(name: str, items: list[tuple[str, bytes]]) -> DataSource:
    """One source from ``(relative path, file bytes)`` in path order."""
    train: list[bytes] = []
    held: list[bytes] = []
    for rel, data in items:
        (held if _is_eval(rel) else train).extend(_read_texts(rel, data))
    if not held or not train:
        # Too few files to split by name: hold out the tail of the stream instead.
        data = _DOC_SEPARATOR.join(train + held)
        cut = len(data) - max(len(data) * EVAL_PERCENT // 100, 1)
        train, held = [data[:cut]], [data[cut:]]
    log.debug("source %s: %d train bytes, %d eval bytes", name, sum(map(len, train)),
              sum(map(len, held)))  # fmt: skip
    return DataSource(name, _to_tensor(train), _to_tensor(held))


def _is_test_path(rel: str) -> bool:
    return any(part in ("test", "tests", "idle_test") for part in rel.split("/")[:-1])


def stdlib_files(root: Path) -> list[tuple[str, bytes]]:
    """The default corpus' rule over a standard library folder: every library ``.py`` file, and
    the test suite's in path order up to :data:`TESTS_BYTES`, as ``(relative path, bytes)``."""
    files = sorted(
        (p.relative_to(root).as_posix(), p)
        for p in root.rglob("*.py")
        if "site-packages" not in p.relative_to(root).parts
    )
    if not files:
        raise DataError(f"no .py files under the standard library folder {root}")
    out, tests = [], 0
    for rel, path in files:
        if _is_test_path(rel):
            if tests >= TESTS_BYTES:
                continue
            tests += path.stat().st_size
        out.append((rel, path.read_bytes()))
    return out


def _stdlib_corpus(items: list[tuple[str, bytes]], *, name: str) -> Corpus:
    lib = [(rel, data) for rel, data in items if not _is_test_path(rel)]
    tests = [(rel, data) for rel, data in items if _is_test_path(rel)]
    sources = [_build_source("stdlib", lib), _build_source("stdlib-tests", tests)]
    return Corpus(sources, name=name, manifest=DataManifest.of(items))


@lru_cache(maxsize=2)
def _default_corpus(path: str) -> Corpus:
    try:
        with zipfile.ZipFile(path) as archive:
            items = [(n, archive.read(n)) for n in sorted(archive.namelist())]
    except (OSError, zipfile.BadZipFile) as exc:
        raise DataError(
            f"the default corpus {path} cannot be read ({exc}): reinstall coloco, or pass "
            "--data with the run's data folder"
        ) from None
    corpus = _stdlib_corpus(items, name="stdlib")
    log.info("default corpus: %d files, data root 0x%s", len(items), corpus.root.hex())
    return corpus
