"""protocol.files.DirectWriter: whole files through O_DIRECT, byte for byte, atomically, and
through the cache where a filesystem refuses O_DIRECT."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from protocol import files


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
