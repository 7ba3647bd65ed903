"""The error-feedback residual of the sparse wire format: node state carried across rounds.

With ``WireFormat.SPARSE`` a node sends the top-k of ``update + residual * beta`` and keeps the
rest (:func:`reference.codec.sparse.encode_feedback`). :class:`Residuals` holds that state per
round: ``after[r]`` is what is left after round r's packet. Round r+1 starts from ``after[r]``
(under the overlap schedule round r is still in flight then; a round that does not land drops the
node's state, residuals included).

A residual is used only with the state it belongs to: when the node adopts the checkpoint of
round r (start-up, catching up, resync) it keeps ``after[r]`` if it landed round r itself, or
reads it from its state folder (``residual.safetensors``, written with each checkpoint it
saves); otherwise it starts from a zero residual. So a restart from its own checkpoint loses
nothing, and a rejoin from a peer's checkpoint (after rounds without it, or a round it lost)
starts afresh: the mass it had not sent was relative to a base the run has left.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import Tensor

from protocol.blobs import decode_blob
from protocol.errors import ColocoError
from protocol.files import DirectWriter

log = logging.getLogger(__name__)

FILE = "residual.safetensors"


class Residuals:
    """A node's error-feedback residuals by round, and their copy on disk (``folder``)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.after: dict[int, Tensor] = {}
        self.landed: int | None = None
        self._writer = DirectWriter()

    def before(self, r: int) -> Tensor | None:
        """The residual round ``r`` starts from (None: zero)."""
        return self.after.get(r - 1)

    def made(self, r: int, residual: Tensor | None) -> None:
        """Round ``r``'s packet left ``residual`` (None: a dense format, nothing carried)."""
        self.after = {k: v for k, v in self.after.items() if k >= r - 1}
        if residual is None:
            self.after.pop(r, None)
        else:
            self.after[r] = residual

    def landed_round(self, r: int) -> None:
        """Round ``r`` landed (its checkpoint saved): its residual goes to disk beside it."""
        self.landed = r
        residual = self.after.get(r)
        if self.folder is None:
            return
        path = self.folder / FILE
        if residual is None:
            path.unlink(missing_ok=True)
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self._writer.write_tensors(path, {"residual": residual, "round": torch.tensor([r])})

    def adopt(self, r: int) -> None:
        """The node now holds the state after round ``r``: keep only the residual that goes
        with it (its own, in memory or on disk), else start from zero."""
        kept = self.after.get(r) if self.landed == r else self._load(r)
        self.after = {} if kept is None else {r: kept}
        self.landed = r if kept is not None else None
        log.info("state of round %d adopted with %s error-feedback residual", r,
                 "its" if kept is not None else "a zero")  # fmt: skip

    def drop(self) -> None:
        """The node's state is not its round's any more: nothing it carried is kept."""
        self.after, self.landed = {}, None

    def _load(self, r: int) -> Tensor | None:
        path = None if self.folder is None else self.folder / FILE
        if path is None or not path.is_file():
            return None
        try:
            t = decode_blob(path.read_bytes(), max_bytes=1 << 36)
            saved = int(t["round"].item())
        except (ColocoError, KeyError, ValueError, RuntimeError) as exc:
            log.warning("%s is unreadable (%s): starting from a zero residual", path, exc)
            return None
        return t["residual"] if saved == r else None
