"""Large files written whole, with little of the CPU's time: the node's boundary states.

A node keeps every boundary state of its last rounds on disk (trainer.round.boundaries: 129 MB
for a cpu10m state, 11 a round). Through the page cache each such write cost the writing
process 0.23-0.79 s of kernel CPU on this project's machines (the copy into the cache and its
reclaim), about 5 s a round, on cores the inner steps need. Written with ``O_DIRECT`` from a
page-aligned buffer the same bytes cost ~0.004 s of kernel CPU (0.09 s wall: the disk's DMA).

:class:`DirectWriter` writes a file so: the bytes into its one reused aligned buffer, written to
the next multiple of :data:`ALIGN`, the file truncated to their length, through a temporary
renamed over the target (a reader sees the old file or the new, never part of one). Where the
filesystem refuses ``O_DIRECT`` (tmpfs on older kernels, some network filesystems) it writes
through the cache.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from protocol.blobs import blob_layout

log = logging.getLogger(__name__)

ALIGN = 4096
"""What O_DIRECT needs of the buffer's address, the length and the file offset."""


class DirectWriter:
    """Writes whole files with ``O_DIRECT`` (module docstring); its buffer is reused from one
    file to the next (one write at a time: a lock)."""

    def __init__(self) -> None:
        self._buffer: mmap.mmap | None = None
        self._lock = threading.Lock()
        self.direct = hasattr(os, "O_DIRECT")
        """False once a filesystem refused O_DIRECT (then every write goes through the cache)."""

    def _aligned(self, size: int) -> mmap.mmap:
        if self._buffer is None or len(self._buffer) < size:
            if self._buffer is not None:
                self._buffer.close()
            self._buffer = mmap.mmap(-1, size)  # anonymous: page-aligned
        return self._buffer

    def write(self, path: Path, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to ``path`` (``<path>.tmp`` first, renamed over it). A write that fails
        leaves ``path`` as it was and removes the temporary."""
        view = memoryview(data).cast("B")

        def fill(buffer: mmap.mmap) -> None:
            buffer[: len(view)] = view

        self._write(Path(path), len(view), fill)

    def write_tensors(self, path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
        """Write the safetensors blob of ``tensors`` (protocol.blobs.blob_layout: for fp32
        tensors encode_blob's bytes) to ``path`` as :meth:`write` does, each tensor's bytes
        copied straight into the buffer (no blob made in between)."""
        head, order = blob_layout(tensors)
        size = len(head) + sum(t.numel() * t.element_size() for _, t in order)

        def fill(buffer: mmap.mmap) -> None:
            buffer[: len(head)] = head
            position = len(head)
            for _, t in order:
                n = t.numel() * t.element_size()
                if n:
                    out = torch.frombuffer(buffer, dtype=torch.uint8, count=n, offset=position)
                    out.copy_(t.reshape(-1).view(torch.uint8))
                position += n

        self._write(Path(path), size, fill)

    def _write(self, path: Path, size: int, fill: Callable[[mmap.mmap], None]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with self._lock:
            try:
                padded = -(-size // ALIGN) * ALIGN
                buffer = self._aligned(max(padded, ALIGN))
                fill(buffer)  # (what follows the size, to the alignment, is cut by the truncate)
                if not (self.direct and self._write_direct(tmp, buffer, size, padded)):
                    with memoryview(buffer)[:size] as view:
                        tmp.write_bytes(view)
                tmp.replace(path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def _write_direct(self, tmp: Path, buffer: mmap.mmap, size: int, padded: int) -> bool:
        """The buffer's first ``size`` bytes through O_DIRECT (``padded``: rounded up to the
        alignment); False (the temporary to be written again through the cache) where the
        filesystem refuses it, at the open or at the first write."""
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        except OSError as exc:
            return self._refused(tmp, exc)
        try:
            with memoryview(buffer)[:padded] as out:
                done = 0
                while done < padded:
                    try:
                        done += os.write(fd, out[done:])
                    except OSError as exc:
                        if done:
                            raise
                        return self._refused(tmp, exc)
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        return True

    def _refused(self, tmp: Path, exc: OSError) -> bool:
        if exc.errno != errno.EINVAL:
            raise exc
        log.info("%s: the filesystem refuses O_DIRECT, writing through the cache", tmp.parent)
        self.direct = False
        return False
