"""`coloco model pull | info | verify | eval | sample`: use the model a run trained.

`pull` fetches a committed round's checkpoint (or the released one) from the ledger or peers and
keeps it only if its hash is the one on chain; `info` says what a file is (preset, parameters,
run, round, tokens trained, config version); `verify` checks a file you already have against the
chain; `eval` measures its held-out loss beside the previous round's and the uniform baseline;
`sample` continues a prompt. The work is in `coloco_cli.model.ops`, `.info` and `.evaluate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from coloco_cli.common import JsonOpt, console, emit_json
from coloco_cli.tx import TxOptions, open_chain, reads, report

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
@reads
def eval_(
    checkpoint: CheckpointArg,
    *,
    model: Annotated[
        str | None,
        typer.Option(help="The run's model preset (default: the one the weights' shape is)."),
    ] = None,
    rows: Annotated[int, typer.Option(min=1, max=100_000, help="Held-out rows to score.")] = 64,
    previous: Annotated[
        Path | None,
        typer.Option(
            help="Checkpoint to compare with (default: the round before this file's, found by "
            "its hash on chain and pulled from --ledger-url)."
        ),
    ] = None,
    opts: TxOptions,
) -> None:
    """Held-out loss (nats/byte) beside the previous round's and the uniform baseline (5.545).

    The loss is on the default corpus's eval split; the uniform-bytes baseline is ln 256, a
    model that knows nothing; the previous round is found by the file's hash on chain.

    Example: coloco model eval demo-round3.safetensors --rows 64
    """
    from coloco_cli.model.evaluate import compare

    out = compare(opts, checkpoint, model, rows, previous)
    if opts.json_out:
        emit_json(out)
        return
    console.print(compare_text(out), markup=False, highlight=False)


def compare_text(out: dict[str, Any]) -> str:
    where = f" (round {out['round']} of run {out['run_id']})" if out["round"] is not None else ""
    lines = [f"held-out loss {out['eval_loss']:.4f} nats/byte over {out['rows']} rows{where}"]
    prev = out["previous"]
    if prev is not None:
        delta = out["eval_loss"] - prev["eval_loss"]
        lines.append(
            f"  previous ({prev['what']}): {prev['eval_loss']:.4f} nats/byte, this one "
            f"{'lower' if delta < 0 else 'higher'} by {abs(delta):.4f}"
        )
    else:
        lines.append(f"  previous round: {out['previous_unknown']}")
    lines.append(
        f"  uniform bytes baseline: {out['uniform_baseline']:.4f} nats/byte (ln 256: a model "
        "that knows nothing)"
    )
    return "\n".join(lines)


@app.command()
@reads
def info(
    checkpoint: CheckpointArg,
    *,
    run: Annotated[
        str | None, typer.Option("--run", help="Only look in this run (name or 0x id).")
    ] = None,
    opts: TxOptions,
) -> None:
    """What a checkpoint is: preset, parameters, hash, run, round, tokens trained, config.

    The preset and parameter count come from the weights; the run, round and verified tokens
    trained from the chain's RoundCommitted logs; the config version from the ledger (the
    nodes' attestations) when it answers, else from TrainingConfig at the round's commit.

    Example: coloco model info demo.safetensors
    """
    from coloco_cli.model.info import describe
    from coloco_cli.run.ops import parse_run_id

    rid = parse_run_id(run) if run is not None else None
    ep = opts.endpoints()
    out = describe(lambda: open_chain(ep), ep.ledger_url, checkpoint, rid)
    report(opts, out, info_text)


def info_text(out: dict[str, Any]) -> str:
    shape = (
        f"{out['preset'] or 'no preset'} (n_layer {out['n_layer']}, d_model {out['d_model']}, "
        f"seq_len {out['seq_len']}, vocab {out['vocab_size']})"
    )
    rows = [("hash", out["checkpoint"]), ("preset", shape),
            ("parameters", f"{out['parameters']:,}")]  # fmt: skip
    if out["chain_unread"] is not None:
        rows.append(("run", f"unknown: the chain was not read ({out['chain_unread']})"))
    elif out["run_id"] is None:
        rows.append(("run", "none: no round on this chain committed this hash"))
    else:
        version = out["config_version"]
        rows += [
            ("run", out["run_id"]),
            ("round", f"{out['round']} (the run's last committed: {out['last_round']})"),
            ("tokens trained", f"{out['tokens_trained']:,} (verified, rounds 1..{out['round']})"),
            ("config version", "none (genesis)" if version is None else
             f"{version} ({out['config_version_from']})"),
        ]  # fmt: skip
    if out["released"] is not None:
        rows.append(("released", "yes" if out["released"] else "no"))
    return f"checkpoint {out['file']}\n" + "\n".join(f"  {k:<15} {v}" for k, v in rows)


@app.command()
@reads
def verify(
    checkpoint: CheckpointArg,
    run_id: Annotated[
        str | None, typer.Argument(help="The run (name or 0x id); omit to search every run.")
    ] = None,
    *,
    round: Annotated[
        int | None, typer.Option("--round", min=0, help="Committed round (default: the last).")
    ] = None,
    released: Annotated[
        bool, typer.Option(help="Compare with the checkpoint TrainingConfig names as released.")
    ] = False,
    opts: TxOptions,
) -> None:
    """Check a local checkpoint file against the hash the chain commits for its round.

    Exit 1 naming both hashes when they differ. Without RUN_ID, any committed round (or the
    released checkpoint) with the file's hash matches.

    Example: coloco model verify demo.safetensors demo --round 2
    """
    from coloco_cli.model.info import verify_file
    from coloco_cli.run.ops import parse_run_id

    if released and (run_id is not None or round is not None):
        raise typer.BadParameter("--released takes no RUN_ID or --round")
    if round is not None and run_id is None:
        raise typer.BadParameter("--round needs the RUN_ID it belongs to")
    rid = parse_run_id(run_id) if run_id is not None else None
    chain = open_chain(opts.endpoints())
    out = verify_file(chain, checkpoint, rid, round, released)
    what = out.get("what") or (
        "the released checkpoint" if out.get("released") else
        f"round {out['round']} of run {out['run_id']}"
    )  # fmt: skip
    report(opts, out, f"{checkpoint}: {out['checkpoint']} matches {what} on chain")


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
