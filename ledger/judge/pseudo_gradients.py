"""The pseudo-gradients of a round as tensors: every member's blob loaded, a commitment blob
decoded (:mod:`reference.commitment`) and laid out by the model's parameter shapes, then checked
for the model's shapes, finite values and a non-zero update
(:func:`ledger.judge.tensors.integrity`).
``coloco audit`` decodes blobs the same way (:func:`decode_pseudo_gradient`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.judge.entries import Context, Entry
from ledger.judge.tensors import Tensors, canonical_flat, integrity

if TYPE_CHECKING:
    from reference.codec import Packet


def load_pseudo_gradients(entries: list[Entry], ctx: Context, model: Tensors | None) -> None:
    """Load every member's blob; a zero update still took part in the all-reduce (kept for the
    members' step), a wrong-shaped or non-finite one could not have."""
    for e in entries:
        if e.check == "not_a_member":
            continue
        raw = ctx.blobs.tensors(e.att.pseudo_gradient)
        if raw is None:
            e.fail(
                "missing_blob",
                f"pseudo-gradient blob {e.att.pseudo_gradient} was not uploaded: "
                "PUT /v1/blobs/{hash} before attesting",
            )
            continue
        tensors, e.packet, why = decode_pseudo_gradient(raw, model)
        if why is None:
            why = _format_mismatch(e.packet, ctx)
        if why is not None:
            e.fail("shape_mismatch", why)
            continue
        bad = integrity(tensors, model)
        if bad is None or bad[0] == "zero_update":
            e.tensors = tensors
            e.flat = canonical_flat(tensors)
        if bad is not None:
            e.fail(*bad)


def _format_mismatch(packet: Packet | None, ctx: Context) -> str | None:
    """A sparse commitment in a dense round, or a dense one in a sparse round: the members'
    mean (reference.mean) cannot mix them, and no honest member sent it."""
    from reference.settings import WireFormat

    governed = WireFormat.parse(ctx.config.wire_format)
    if packet is None or (packet.fmt is WireFormat.SPARSE) == (governed is WireFormat.SPARSE):
        return None
    return (
        f"commitment is a {packet.fmt.label} packet but the round's wire format is "
        f"{governed.label} (TrainingConfig.wireFormat): encode in the governed format"
    )


def load_earlier(ctx: Context, blob: str) -> Tensors | None:
    """An earlier pseudo-gradient blob as named tensors (a commitment decoded), or None."""
    raw = ctx.blobs.tensors(blob)
    if raw is None:
        return None
    tensors, _, bad = decode_pseudo_gradient(raw, ctx.model)
    return None if bad is not None else tensors


def decode_pseudo_gradient(
    raw: Tensors, model: Tensors | None
) -> tuple[Tensors, Packet | None, str | None]:
    """(named tensors, the packet or None, why it is malformed): a commitment blob is decoded
    and laid out by the model's parameter shapes; named fp32 tensors are taken as they are."""
    from reference.commitment import FLAT, is_commitment, packet_of
    from reference.outer import FlatLayout

    if not is_commitment(dict(raw)):
        return raw, None, None
    try:
        from reference.codec import decode

        packet = packet_of(dict(raw))
        flat = decode(packet)
    except Exception as exc:  # EncodingError / codec checks: a malformed commitment
        return raw, None, f"commitment blob does not decode: {exc}"
    if model is None:
        return {FLAT: flat}, packet, None
    layout = FlatLayout({n: t.shape for n, t in model.items()})
    if flat.numel() != layout.numel:
        return raw, None, f"commitment has {flat.numel()} values, the model {layout.numel}"
    return layout.unflatten(flat), packet, None
