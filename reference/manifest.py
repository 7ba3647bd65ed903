"""The run's data named by content: a manifest of the corpus' files and its root.

A :class:`DataManifest` is the sorted list of ``(path, sha256 of the file's bytes)`` of every file
a :class:`~reference.data.Corpus` was built from (paths relative to the corpus' root, ``/``
separated). Its :attr:`~DataManifest.root` is sha256 over a domain tag and each entry (the path's
length, the path, the file's hash), so two corpora with the same root hold the same files with
the same bytes, and build the same sources, shards and eval rows on every machine.

The run pins its data by this root (``TrainingConfig.dataRoot``, governed like the rest); a node
checks it with :func:`check_root` before it trains a round, and the ledger before it scores one.
A mismatch is a :class:`DataMismatch` naming the roots and, when the expected manifest is known
(the shipped default corpus, or one passed in), which files are missing, extra or changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from protocol.errors import DataError

_DOMAIN = b"coloco.data.v1"
SHOWN = 8
"""Files named per kind (missing, extra, changed) in a mismatch; the rest are counted."""


def root_hex(root: bytes) -> str:
    return "0x" + root.hex()


@dataclass(frozen=True)
class DataManifest:
    """``(path, sha256)`` of a corpus' files, sorted by path."""

    files: tuple[tuple[str, bytes], ...]

    @classmethod
    def of(cls, entries: Iterable[tuple[str, bytes]]) -> DataManifest:
        """From ``(path, file bytes)`` pairs (any order); a path listed twice is an error."""
        hashed = {}
        for path, data in entries:
            if path in hashed:
                raise DataError(f"data manifest: {path!r} listed twice")
            hashed[path] = hashlib.sha256(data).digest()
        return cls(tuple(sorted(hashed.items())))

    @property
    def root(self) -> bytes:
        """The bytes32 that names this data (``TrainingConfig.dataRoot``)."""
        h = hashlib.sha256(_DOMAIN)
        h.update(len(self.files).to_bytes(8, "big"))
        for path, digest in self.files:
            raw = path.encode()
            h.update(len(raw).to_bytes(4, "big"))
            h.update(raw)
            h.update(digest)
        return h.digest()

    def diff(self, expected: DataManifest) -> str:
        """What this data lacks, adds and changes against ``expected`` (a sentence per kind)."""
        mine, theirs = dict(self.files), dict(expected.files)
        kinds = (
            ("missing", sorted(set(theirs) - set(mine))),
            ("extra", sorted(set(mine) - set(theirs))),
            ("changed", sorted(p for p in set(mine) & set(theirs) if mine[p] != theirs[p])),
        )
        parts = []
        for kind, paths in kinds:
            if paths:
                more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
                parts.append(f"{len(paths)} {kind} ({', '.join(paths[:SHOWN])}{more})")
        return "; ".join(parts) or "the same files"

    def to_json(self) -> list[list[str]]:
        return [[path, digest.hex()] for path, digest in self.files]

    @classmethod
    def from_json(cls, data: object) -> DataManifest:
        try:
            pairs = [(str(p), bytes.fromhex(str(h))) for p, h in data]  # type: ignore[attr-defined]
        except (TypeError, ValueError) as exc:
            raise DataError(f"data manifest: expected [[path, sha256 hex], ...] ({exc})") from None
        return cls(tuple(sorted(pairs)))


class DataMismatch(DataError):
    """The data at hand is not the run's: training or scoring on it would not be the run's work."""

    code = "data_mismatch"


def check_root(
    manifest: DataManifest,
    expected_root: bytes,
    *,
    what: str,
    expected: DataManifest | None = None,
) -> None:
    """Refuse (:class:`DataMismatch`) data whose root is not the run's ``expected_root``.

    ``what`` names the data ("this node's data (--data ./corpus)"); ``expected`` is the run's
    manifest when known, to name the files that differ."""
    got = manifest.root
    if got == expected_root:
        return
    detail = ""
    if expected is not None and expected.root == expected_root:
        detail = f": {manifest.diff(expected)}"
    raise DataMismatch(
        f"{what} is not the run's data: the run pins data root {root_hex(expected_root)}, this "
        f"data's root is {root_hex(got)} ({len(manifest.files)} files){detail}. Train on the "
        "run's data: the default corpus (omit --data) when the run pins it, else the folder the "
        "run names (`coloco node doctor` shows the roots)"
    )
