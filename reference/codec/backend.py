"""Which codec backend runs on a device: "triton" (CUDA tensors, when triton imports), "native"
(C kernels, CPU), "torch" (the pure-torch reference). `COLOCO_CODEC=torch|native|triton`
overrides the automatic choice (reference.codec.dispatch describes the backends)."""

from __future__ import annotations

import importlib.util
import os

import torch

from protocol.errors import ConfigError
from reference.codec import native

BACKENDS = ("torch", "native", "triton")


def _triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def resolve_backend(device: torch.device, requested: str | None = None) -> str:
    """Name of the backend that runs on `device` (`requested`, else $COLOCO_CODEC, else auto)."""
    name = (requested or os.environ.get("COLOCO_CODEC") or "auto").strip().lower()
    if name == "auto":
        if device.type == "cuda" and _triton_importable():
            return "triton"
        if device.type == "cpu" and native.load() is not None:
            return "native"
        return "torch"
    if name not in BACKENDS:
        raise ConfigError(
            f"COLOCO_CODEC={name!r} is not a codec backend: use one of auto, {', '.join(BACKENDS)}"
        )
    if name == "native" and device.type != "cpu":
        raise ConfigError(
            f"the native codec runs on CPU tensors only, these are on {device}: "
            "use COLOCO_CODEC=triton or auto"
        )
    if name == "triton":
        if not _triton_importable():
            raise ConfigError("COLOCO_CODEC=triton but triton is not installed: pip install triton")
        if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ConfigError(
                "Triton kernels run on CPU tensors only under TRITON_INTERPRET=1 "
                "(set it before importing triton), or use COLOCO_CODEC=native"
            )
    return name
