"""Benchmarks: `python -m bench.NAME`, each printing one JSON object as its last line."""


def emit(name: str, out: dict[str, object]) -> None:
    """Print a benchmark's result as one JSON line (its last line of output), and also write it
    to ``$COLOCO_BENCH_OUT/<name>.json`` when that folder is set (to keep a run's figures)."""
    import json
    import os
    from pathlib import Path

    line = json.dumps(out)
    folder = os.environ.get("COLOCO_BENCH_OUT")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(line + "\n")
    print(line)
