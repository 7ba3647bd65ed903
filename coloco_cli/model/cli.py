"""`coloco model pull | eval | sample`: use the model a run trained (holders, anyone).

`pull` fetches a committed round's checkpoint (or the released one) from the ledger or peers and
keeps it only if its hash is the one on chain; `eval` measures its held-out loss; `sample`
continues a prompt. The work is in `coloco_cli.model.ops`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from coloco_cli.common import JsonOpt, console, emit_json
from coloco_cli.tx import TxOptions, open_chain, reads

app = typer.Typer(no_args_is_help=True)

CheckpointArg = Annotated[Path, typer.Argument(help="Checkpoint file from `coloco model pull`.")]
ModelOpt = Annotated[str, typer.Option(help="The run's model preset (tiny, small, ...).")]


@app.command()
@reads
def pull(
    run_id: Annotated[
        str | None,
        typer.Argument(help="Run id or name; omit with --released for the released model."),
    ] = None,
    *,
    round: Annotated[
        int | None, typer.Option("--round", min=0, help="Committed round (default: the last).")
    ] = None,
    released: Annotated[
        bool, typer.Option(help="The checkpoint TrainingConfig names as released.")
    ] = False,
    source: Annotated[
        list[str] | None,
        typer.Option(help="Also try this peer/ledger base URL (repeatable), after --ledger-url."),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Where to write the .safetensors file.")] = None,
    opts: TxOptions,
) -> None:
    """Download a checkpoint and check its hash against the chain before keeping it.

    Example: coloco model pull demo --round 3 --out demo-r3.safetensors
    """
    from coloco_cli.model.ops import Pulled, expected_hash, fetch
    from coloco_cli.run.ops import parse_run_id
    from protocol.errors import ConfigError

    if released == (run_id is not None):
        raise typer.BadParameter("give a RUN_ID or --released (one of them)")
    ep = opts.endpoints()
    rid = parse_run_id(run_id) if run_id is not None else None
    expected, target = expected_hash(open_chain(ep), rid, round)
    data, src = fetch([ep.ledger_url, *(source or [])], expected)
    if out is None:
        out = Path(f"released-{expected.hex()[:12]}.safetensors" if rid is None else
                   f"{run_id}-round{target}.safetensors")  # fmt: skip
    if out.exists() and out.is_dir():
        raise ConfigError(f"--out {out} is a folder: name a file")
    out.write_bytes(data)
    pulled = Pulled(
        run_id=None if rid is None else "0x" + rid.hex(),
        round=target,
        checkpoint="0x" + expected.hex(),
        source=src,
        path=str(out),
        bytes=len(data),
    )
    if opts.json_out:
        emit_json(pulled.__dict__)
        return
    what = "released checkpoint" if rid is None else f"round {target}"
    console.print(f"{what} 0x{expected.hex()} matches the chain; written to [bold]{out}[/]")


@app.command("eval")
def eval_(
    checkpoint: CheckpointArg,
    *,
    model: ModelOpt = "tiny",
    rows: Annotated[int, typer.Option(min=1, max=100_000, help="Held-out rows to score.")] = 64,
    json_out: JsonOpt = False,
) -> None:
    """Held-out loss of a checkpoint on the default corpus's eval split (nats per byte).

    Example: coloco model eval demo-round3.safetensors
    """
    from coloco_cli.model.ops import held_out_loss, load_model

    loss = held_out_loss(load_model(checkpoint, model), rows)
    if json_out:
        emit_json({"checkpoint": str(checkpoint), "eval_loss": round(loss, 5), "rows": rows})
        return
    console.print(f"held-out loss {loss:.4f} nats/byte over {rows} rows")


@app.command("sample")
def sample_(
    checkpoint: CheckpointArg,
    *,
    prompt: Annotated[str, typer.Option(help="Text to continue.")],
    model: ModelOpt = "tiny",
    tokens: Annotated[int, typer.Option(min=1, max=4096, help="Bytes to generate.")] = 64,
    temperature: Annotated[float, typer.Option(min=0.0, max=10.0, help="0 = greedy.")] = 0.8,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Continue a prompt with a checkpoint.

    Example: coloco model sample demo-round3.safetensors --prompt "def main("
    """
    from coloco_cli.model.ops import load_model, sample

    text = sample(
        load_model(checkpoint, model), prompt, tokens=tokens, temperature=temperature, seed=seed
    )
    if json_out:
        emit_json({"prompt": prompt, "completion": text})
        return
    typer.echo(prompt + text)
