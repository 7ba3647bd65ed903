"""protocol.files.DirectWriter: whole files through O_DIRECT, byte for byte, atomically, and
through the cache where a filesystem refuses O_DIRECT."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from protocol import files
from protocol.blobs import decode_blob, encode_blob
from protocol.hashing import hash_state_dict


@pytest.mark.parametrize("size", [0, 1, files.ALIGN - 1, files.ALIGN, 3 * files.ALIGN + 17])
def test_any_length_lands_byte_for_byte_and_the_buffer_is_reused(tmp_path: Path, size: int) -> None:
    writer = files.DirectWriter()
    target = tmp_path / "state.safetensors"
    target.write_bytes(b"the old state")
    data = os.urandom(size)
    writer.write(target, data)
    assert target.read_bytes() == data  # padded to the alignment for the write, then truncated
    assert [p.name for p in tmp_path.iterdir()] == ["state.safetensors"]  # no temporary left
    assert writer.direct, "the tests' filesystem takes O_DIRECT: the direct path is what ran"
    shorter = os.urandom(max(size // 2, 1))
    writer.write(target, shorter)  # the same buffer, a shorter file: none of the old bytes
    assert target.read_bytes() == shorter


def test_a_filesystem_that_refuses_o_direct_gets_the_bytes_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.open

    def refusing(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, flags, mode)

    monkeypatch.setattr(os, "open", refusing)
    writer = files.DirectWriter()
    data = os.urandom(10_000)
    writer.write(tmp_path / "a", data)
    assert (tmp_path / "a").read_bytes() == data and not writer.direct


def test_a_filesystem_that_refuses_the_first_direct_write_gets_it_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.write
    refused: list[int] = []

    def refusing(fd: int, data: bytes) -> int:
        if not refused:  # the first write is the O_DIRECT one
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data)

    monkeypatch.setattr(os, "write", refusing)
    writer = files.DirectWriter()
    data = os.urandom(10_000)
    writer.write(tmp_path / "b", data)
    assert refused and (tmp_path / "b").read_bytes() == data and not writer.direct


def test_a_write_that_fails_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ckpt"
    target.write_bytes(b"the old round")

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        files.DirectWriter().write(target, os.urandom(5_000))
    assert target.read_bytes() == b"the old round"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # the temporary removed


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {
        "weights/blocks.0.w": torch.randn(33, 7, generator=g),
        "weights/a": torch.randn(5, generator=g),
        "adam/a/exp_avg": torch.randn(5, generator=g),
        "adam/step": torch.tensor(7.0),
        "residual/a": torch.zeros(5),
        "weights/none": torch.zeros(0, 3),
    }


def test_a_states_tensors_are_written_as_encode_blobs_bytes(tmp_path: Path) -> None:
    """An fp32 state (what the boundary store writes): encode_blob's bytes exactly, the
    tensors placed straight into the writer's buffer; a transposed (non-contiguous) tensor
    is written by value."""
    state = _state()
    state["weights/t"] = torch.randn(4, 6).t()
    files.DirectWriter().write_tensors(tmp_path / "s", state)
    assert (tmp_path / "s").read_bytes() == encode_blob(state)


def test_tensors_of_any_dtype_read_back_the_same(tmp_path: Path) -> None:
    state = {
        **_state(),
        "i8": torch.tensor([-3, 4], dtype=torch.int8),
        "flag": torch.tensor([True, False, True]),
        "bf": torch.randn(9).bfloat16(),
        "f64": torch.randn(2, 2, dtype=torch.float64),
        "i64": torch.arange(3),
    }
    path = tmp_path / "mixed"
    files.DirectWriter().write_tensors(path, state)
    back = decode_blob(path.read_bytes(), max_bytes=1 << 20)
    assert set(back) == set(state)
    assert all(back[k].dtype == t.dtype and torch.equal(back[k], t) for k, t in state.items())
    assert hash_state_dict(back) == hash_state_dict(state)
