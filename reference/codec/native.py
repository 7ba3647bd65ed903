"""Native CPU codec: a small C library built with the machine's C compiler on first use.

The shared object is cached under `$COLOCO_CACHE_DIR/codec` (default `~/.cache/coloco/codec`),
keyed by a hash of the source, the flags, the compiler and the CPU, so a rebuild happens only when
one of those changes (about a second with gcc). Nothing is downloaded. If no compiler is found or
the build fails, `load()` returns None and the dispatcher falls back to the torch reference.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from protocol.errors import ConfigError
from reference.codec.formats import PAYLOAD_DTYPE, num_blocks
from reference.codec.native_src import C_SOURCE
from reference.codec.pure import nonfinite_error
from reference.settings import WireFormat

log = logging.getLogger(__name__)

MAX_SKETCH_PARTS = 4  # MAX_PARTS in the C source
CFLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC")
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tried = False
_error: str | None = None


def _cpu_identity() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor()
    keep = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))][:2]
    return "\n".join(keep)


def cache_dir() -> Path:
    root = os.environ.get("COLOCO_CACHE_DIR") or str(Path.home() / ".cache" / "coloco")
    return Path(root) / "codec"


def _build(compiler: str) -> Path:
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=False
    ).stdout
    key = hashlib.sha256(
        "\0".join([C_SOURCE, " ".join(CFLAGS), version, _cpu_identity()]).encode()
    ).hexdigest()[:16]
    target = cache_dir() / f"coloco_codec_{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "codec.c"
        src.write_text(C_SOURCE)
        out = Path(tmp) / "codec.so"
        proc = subprocess.run(
            [compiler, *CFLAGS, "-o", str(out), str(src)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {proc.stderr.strip()[:2000]}")
        out.replace(target)
    log.info("built native codec kernels at %s", target)
    return target


def _bind(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.coloco_enc_i8.argtypes = [p, p, i64, i64, p, p]
    lib.coloco_enc_i8.restype = i64
    lib.coloco_dec_i8.argtypes = [p, p, i64, i64, p, i32]
    lib.coloco_dec_i8.restype = None
    lib.coloco_enc_dense.argtypes = [p, p, i64, i32, p]
    lib.coloco_enc_dense.restype = i64
    lib.coloco_dec_bf16.argtypes = [p, i64, p, i32]
    lib.coloco_dec_bf16.restype = None
    lib.coloco_sparse_select.argtypes = [p, i64, i64, i64, i64, p, p, p]
    lib.coloco_sparse_select.restype = i64
    u64 = ctypes.c_uint64
    lib.coloco_count_sketch.argtypes = [ctypes.POINTER(p), p, i64, i64, i64, u64, u64, i64, p]
    lib.coloco_count_sketch.restype = None
    lib.coloco_sq_diff.argtypes = [p, p, i64]
    lib.coloco_sq_diff.restype = ctypes.c_double


def load() -> ctypes.CDLL | None:
    """Build (once, cached) and load the native kernels; None when that is impossible here."""
    global _lib, _tried, _error
    with _lock:
        if _tried:
            return _lib
        _tried = True
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            _error = "no C compiler (cc/gcc) on PATH"
        else:
            try:
                lib = ctypes.CDLL(str(_build(compiler)))
                _bind(lib)
                _lib = lib
            except (OSError, RuntimeError) as exc:
                _error = str(exc)
        if _lib is None:
            log.warning("native codec unavailable (%s); using the torch reference", _error)
        return _lib


def require() -> ctypes.CDLL:
    lib = load()
    if lib is None:
        raise ConfigError(
            f"COLOCO_CODEC=native but the native codec could not be built: {_error}; "
            "install gcc or set COLOCO_CODEC=torch"
        )
    return lib


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def encode(
    base: torch.Tensor, local: torch.Tensor | None, fmt: WireFormat, block_size: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    lib = require()
    n = base.numel()
    if fmt is WireFormat.INT8:
        blocks = num_blocks(n, block_size)
        q = torch.empty(blocks * block_size, dtype=torch.int8)
        scales = torch.empty(blocks, dtype=torch.float32)
        bad = lib.coloco_enc_i8(_ptr(base), _ptr(local), n, block_size, _ptr(q), _ptr(scales))
        if bad:
            raise nonfinite_error("the pseudo-gradient")
        return q, scales
    out = torch.empty(n, dtype=PAYLOAD_DTYPE[fmt])
    if lib.coloco_enc_dense(_ptr(base), _ptr(local), n, int(fmt), _ptr(out)):
        raise nonfinite_error("the pseudo-gradient")
    return out, None


def decode_into(
    out: torch.Tensor,
    payload: torch.Tensor,
    scales: torch.Tensor | None,
    fmt: WireFormat,
    block_size: int,
    *,
    accumulate: bool,
) -> None:
    """Write (or add, when `accumulate`) the decoded values into the flat fp32 `out`."""
    lib = require()
    n = out.numel()
    if fmt is WireFormat.INT8:
        assert scales is not None
        lib.coloco_dec_i8(_ptr(payload), _ptr(scales), n, block_size, _ptr(out), int(accumulate))
    elif fmt is WireFormat.BF16:
        lib.coloco_dec_bf16(_ptr(payload), n, _ptr(out), int(accumulate))
    elif accumulate:
        out.add_(payload[:n])
    else:
        out.copy_(payload[:n])


def sparse_select(
    x: torch.Tensor, chunk: int, k: int, levels: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sparse format's (offsets, codes, steps) of the flat fp32 ``x``: the bits of
    ``reference.codec.sparse._select_torch`` (TrainerError on NaN/Inf)."""
    lib = require()
    n = x.numel()
    chunks = -(-n // chunk)
    offsets = torch.empty((chunks, k), dtype=torch.int64)
    codes = torch.empty((chunks, k), dtype=torch.int64)
    steps = torch.empty(chunks, dtype=torch.float32)
    bad = lib.coloco_sparse_select(_ptr(x), n, chunk, k, levels, _ptr(offsets), _ptr(codes),
                                   _ptr(steps))  # fmt: skip
    if bad < 0:
        raise MemoryError("native sparse select: out of memory")
    if bad:
        raise nonfinite_error("the pseudo-gradient plus residual")
    return offsets, codes, steps


def count_sketch(
    parts: Sequence[torch.Tensor | None],
    sub: torch.Tensor | None,
    start: int,
    seed: tuple[int, int],
    buckets: int,
) -> torch.Tensor:
    """The float64 slot sums (``len(parts) x 2 buckets``) of reference.sketch's count-sketch of
    each flat contiguous fp32 vector in ``parts`` (None: zeros), part 0 taken as ``sub - part``
    in fp32 when ``sub`` is given, coordinates numbered from ``start``, one pass for all: the
    bits of ``torch.bincount(slots(seed, start, n), weights=values)`` part by part."""
    lib = require()
    if len(parts) > MAX_SKETCH_PARTS:
        raise ValueError(f"the native count-sketch takes at most {MAX_SKETCH_PARTS} parts")
    n = next(t.numel() for t in parts if t is not None)
    sums = torch.zeros((len(parts), 2 * buckets), dtype=torch.float64)
    xs = (ctypes.c_void_p * len(parts))(*(_ptr(t) for t in parts))
    a, b = seed
    lib.coloco_count_sketch(xs, _ptr(sub), len(parts), n, start, a, b, buckets, _ptr(sums))
    return sums


def sq_diff(a: torch.Tensor, b: torch.Tensor | None) -> float:
    """The float64 sum of squares of ``a - b`` (of ``a`` when ``b`` is None) over two contiguous
    CPU fp32 tensors of one size, each difference in fp32 as torch's ``a - b``: one pass, no
    temporary (the caller checks dtype, device, layout and size)."""
    return float(require().coloco_sq_diff(_ptr(a), _ptr(b), a.numel()))
