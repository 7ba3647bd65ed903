"""Wire codec benchmark: speed per backend, bytes per format, accuracy of the averaged update.

    python -m bench.codec [--quick]

Last line: one JSON object with `codec_ns_per_param` (default CPU backend, one thread, int8
encode fused with the subtraction + decode), `torch_eager_ns_per_param` (the pure-torch reference,
same work), `int8_bytes_ratio_vs_fp32`, and the relative errors of the averaged pseudo-gradient
(8 simulated nodes, the real all-reduce algorithm) for block-wise and per-tensor int8.
"""

from __future__ import annotations

import argparse
import json
import logging

import torch

from trainer.codec import WireFormat, resolve_backend, wire_bytes
from trainer.codec.speed import averaged_errors, measure_codec_ns_per_param

log = logging.getLogger("bench.codec")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller tensors, fewer repeats")
    parser.add_argument("--nodes", type=int, default=8, help="simulated nodes for the accuracy")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    numel = 1 << (20 if args.quick else 22)
    repeats = 3 if args.quick else 7

    default = resolve_backend(torch.device("cpu"))
    speed: dict[str, dict[str, float]] = {}
    for backend in sorted({default, "torch"}):
        speed[backend] = {}
        for fmt in WireFormat:
            ns = measure_codec_ns_per_param(numel, fmt, backend=backend, repeats=repeats)
            speed[backend][fmt.name.lower()] = round(ns, 3)
            log.info("%-7s %-5s %7.2f ns/param", backend, fmt.name.lower(), ns)

    n_bytes = 1 << 24
    fp32 = wire_bytes(n_bytes, WireFormat.FP32)
    result: dict[str, object] = {
        "codec_ns_per_param": speed[default]["int8"],
        "codec_backend": default,
        "torch_eager_ns_per_param": speed["torch"]["int8"],
        "ns_per_param": speed,
        "int8_bytes_ratio_vs_fp32": round(fp32 / wire_bytes(n_bytes, WireFormat.INT8), 4),
        "bf16_bytes_ratio_vs_fp32": round(fp32 / wire_bytes(n_bytes, WireFormat.BF16), 4),
        "threads": 1,
        "numel": numel,
        "nodes": args.nodes,
    }
    acc_numel = 1 << (18 if args.quick else 20)
    for kind in ("gaussian", "student_t"):
        errors = averaged_errors(kind, args.nodes, acc_numel)
        log.info("%-9s %s", kind, {k: round(v, 5) for k, v in errors.items()})
        result[f"rel_err_{kind}_int8_block"] = round(errors["int8"], 5)
        result[f"rel_err_{kind}_int8_per_tensor"] = round(errors["int8_per_tensor"], 5)
        result[f"rel_err_{kind}_bf16"] = round(errors["bf16"], 5)
    result["targets_met"] = {
        "codec_ns_per_param<=10": result["codec_ns_per_param"] <= 10,  # type: ignore[operator]
        "int8_bytes_ratio>=3.9": result["int8_bytes_ratio_vs_fp32"] >= 3.9,  # type: ignore[operator]
        "gaussian_int8<=0.02": result["rel_err_gaussian_int8_block"] <= 0.02,  # type: ignore[operator]
        "student_t_int8<=0.05": result["rel_err_student_t_int8_block"] <= 0.05,  # type: ignore[operator]
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
