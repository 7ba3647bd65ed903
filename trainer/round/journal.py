"""The node's journal: its signed, not yet acknowledged attestations, on disk.

A signed attestation is written here (its pseudo-gradient blob, then a small JSON record; each
file fsync'd, then renamed into place, then the folder fsync'd) before the first attempt to send
it, and removed once the ledger acknowledged it. So neither a ledger outage nor a crash, a kill
-9 or a restart of the node loses a round it trained: the node sends what its journal holds, in
round order, before anything else (:class:`trainer.round.attest.Attester`).

A round the ledger refuses for good (it closed or was committed without it, the node was not a
member) is moved to ``lost/`` with the ledger's reason: ``coloco node status`` shows both lists.

Layout, under the node's state folder (its checkpoint folder)::

    journal/round_00000004.json   {"attestation", "signature", "members", "commits"}
    journal/round_00000004.blob   the pseudo-gradient blob (protocol.blobs)
    journal/lost/round_00000003.json   the record plus {"reason": "round_closed: ..."}
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.attestation import ComputeAttestation
from protocol.errors import ConfigError

log = logging.getLogger(__name__)

FOLDER = "journal"


@dataclass(frozen=True)
class Pending:
    """One signed attestation waiting for the ledger, with what goes with it."""

    attestation: ComputeAttestation
    signature: bytes
    blob: bytes
    members: list[str]
    commits: list[str]

    @property
    def round(self) -> int:
        return int(self.attestation.round)

    def record(self) -> dict[str, Any]:
        return {"attestation": self.attestation.to_json(), "signature": "0x" + self.signature.hex(),
                "members": self.members, "commits": self.commits}  # fmt: skip


def _write(path: Path, data: bytes) -> None:
    """``data`` at ``path``, durably: written to a temporary file, fsync'd, renamed."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """The unsent attestations of one node in one run, in ``<state>/journal``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / FOLDER
        self.lost_path = self.path / "lost"

    def _json(self, round: int) -> Path:
        return self.path / f"round_{round:08d}.json"

    def _blob(self, round: int) -> Path:
        return self.path / f"round_{round:08d}.blob"

    def add(self, item: Pending) -> None:
        """Keep ``item`` (durably) until :meth:`done` or :meth:`lost`."""
        self.path.mkdir(parents=True, exist_ok=True)
        _write(self._blob(item.round), item.blob)  # the record last: it names a complete blob
        _write(self._json(item.round), json.dumps(item.record()).encode())
        _sync_dir(self.path)

    def done(self, round: int) -> None:
        """The ledger acknowledged ``round``: forget it."""
        self._json(round).unlink(missing_ok=True)
        self._blob(round).unlink(missing_ok=True)
        if self.path.is_dir():
            _sync_dir(self.path)

    def lost(self, item: Pending, reason: str) -> None:
        """The ledger refused ``item`` for good: keep its record (not its blob) under lost/."""
        self.lost_path.mkdir(parents=True, exist_ok=True)
        record = item.record() | {"reason": reason}
        _write(self.lost_path / f"round_{item.round:08d}.json", json.dumps(record).encode())
        self.done(item.round)

    def pending(self) -> list[Pending]:
        """What the journal holds, in round order (a record without its blob, a crash between
        the two writes, was never sent and is dropped with a warning)."""
        out = []
        for path in sorted(self.path.glob("round_*.json")) if self.path.is_dir() else []:
            round = int(path.stem.removeprefix("round_"))
            blob = self._blob(round)
            if not blob.is_file():
                log.warning("journal %s: no blob beside it; dropped", path)
                path.unlink()
                continue
            try:
                rec = json.loads(path.read_bytes())
                out.append(Pending(ComputeAttestation.from_json(rec["attestation"]),
                                   bytes.fromhex(str(rec["signature"])[2:]), blob.read_bytes(),
                                   list(rec["members"]), list(rec["commits"])))  # fmt: skip
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(
                    f"journal record {path} is unreadable ({exc}): move it away to start without "
                    "it (its round is then never sent)"
                ) from exc
        return out


def unsent_rounds(state_dir: Path) -> list[int]:
    """The rounds a node's journal still holds (``coloco node status``)."""
    return _rounds(Path(state_dir) / FOLDER)


def lost_rounds(state_dir: Path) -> dict[int, str]:
    """{round: the ledger's reason} of the rounds refused for good."""
    lost = Path(state_dir) / FOLDER / "lost"
    out: dict[int, str] = {}
    for r in _rounds(lost):
        rec = json.loads((lost / f"round_{r:08d}.json").read_bytes())
        out[r] = str(rec.get("reason", ""))
    return out


def node_of(state_dir: Path) -> str | None:
    """The node address that signed what the journal holds (None: nothing in it)."""
    folder = Path(state_dir) / FOLDER
    for path in sorted(folder.glob("round_*.json")) + sorted(folder.glob("lost/round_*.json")):
        return str(json.loads(path.read_bytes())["attestation"]["node"])
    return None


def _rounds(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.stem.removeprefix("round_")) for p in folder.glob("round_*.json"))
