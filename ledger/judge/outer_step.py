"""The ledger's own outer step: the result checkpoint is computed here, never voted.

From the committed base weights, the outer momentum the ledger keeps per run, and a round's
pseudo-gradients (in member order: sorted addresses, the trainer's rank order; a commitment blob's
packet as the node fed it to the all-reduce, named fp32 tensors quantized in the wire format), the
step is the trainer's code: :func:`reference.mean.simulate_average`, token-weighted
(bit-identical to the all-reduce the nodes run) then :meth:`reference.outer.OuterState.step`.
The new weights and momentum are stored as blobs (nodes resync from them:
``GET /v1/runs/{run}/outer/{round}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from sqlmodel import Session

from ledger.core.blobstore import BlobStore
from ledger.core.models import KeyValue
from protocol.blobs import encode_blob
from protocol.hashing import hash_state_dict
from reference.settings import WireFormat

if TYPE_CHECKING:
    from reference.codec import Packet

Tensors = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class OuterResult:
    checkpoint: str
    momentum: str
    weights: dict[str, torch.Tensor]
    momentum_tensors: dict[str, torch.Tensor]


def momentum_key(run_id: str, round_: int) -> str:
    return f"outer:{run_id[2:18]}:{round_}"


def load_momentum(session: Session, blobs: BlobStore, run_id: str, round_: int) -> Tensors | None:
    """The outer momentum after ``round_`` (None: not computed by this ledger, e.g. genesis)."""
    row = session.get(KeyValue, momentum_key(run_id, round_))
    if row is None:
        return None
    return blobs.tensors(row.value)


def outer_step(
    base: Tensors,
    momentum: Tensors | None,
    pseudo_gradients: Sequence[Tensors | Packet],
    *,
    lr: float,
    mu: float,
    wire_format: WireFormat | str,
    weights: Sequence[int] | None = None,
) -> OuterResult:
    """``pseudo_gradients``: named tensors or ``reference.codec.Packet`` (a node's commitment)."""
    from reference.codec import Packet
    from reference.mean import simulate_average
    from reference.outer import FlatLayout, OuterConfig, OuterState

    layout = FlatLayout({n: t.shape for n, t in base.items()})
    state = OuterState(
        layout,
        layout.flatten(base),
        layout.flatten(momentum) if momentum is not None else None,
    )
    vectors = [pg if isinstance(pg, Packet) else layout.flatten(pg) for pg in pseudo_gradients]
    avg = simulate_average(vectors, wire_format, weights=list(weights) if weights else None)  # type: ignore[arg-type]
    state.step(avg, OuterConfig(lr=lr, momentum=mu))
    new, mom = state.weights(), state.momentum_tensors()
    return OuterResult(
        "0x" + hash_state_dict(new).hex(), "0x" + hash_state_dict(mom).hex(), new, mom
    )


def store(session: Session, blobs: BlobStore, run_id: str, round_: int, res: OuterResult) -> None:
    """Keep the new weights and momentum (blobs) and remember the momentum of ``round_``."""
    blobs.put(res.checkpoint, encode_blob(res.weights))
    blobs.put(res.momentum, encode_blob(res.momentum_tensors))
    key = momentum_key(run_id, round_)
    row = session.get(KeyValue, key)
    if row is None:
        session.add(KeyValue(key=key, value=res.momentum))
    else:
        row.value = res.momentum
        session.add(row)
