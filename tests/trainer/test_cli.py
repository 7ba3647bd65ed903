"""`coloco node run` (trainer.cli.run_command): a real offline run, and clear exit codes."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from protocol.devnet import free_port
from protocol.keys import create_keystore
from reference.checkpoint import CheckpointDir
from trainer.cli import build, parse_run_id, run_command
from trainer.flags import fill, parameters
from trainer.options import Identity, Network, NodeOptions, Training

app = typer.Typer()
app.command()(run_command)


@pytest.fixture
def keystore(tmp_path: Path) -> tuple[Path, Path]:
    ks = tmp_path / "node.json"
    create_keystore(ks, "pw", private_key=bytes([5]) * 32, kdf="pbkdf2", light=True)
    pw = tmp_path / "pw.txt"
    pw.write_text("pw\n")
    return ks, pw


def _args(ks: tuple[Path, Path], *extra: str) -> list[str]:
    return ["--run-id", "cli-test", "--keystore", str(ks[0]), "--password-file", str(ks[1]),
            "--plain", *extra]  # fmt: skip


def test_offline_run_trains_and_writes_checkpoints(
    keystore: tuple[Path, Path], corpus_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    ckpts = tmp_path / "ckpt"
    result = CliRunner().invoke(app, _args(
        keystore, "--host-rendezvous", "--rendezvous", f"127.0.0.1:{port}", "--data",
        str(corpus_dir), "--checkpoint-dir", str(ckpts), "--rounds", "2", "--inner-steps", "2",
        "--batch-size", "2", "--join-window", "0",
    ))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert CheckpointDir(ckpts).rounds() == [1, 2]


def test_offline_run_of_a_node_of_two_local_ranks(
    keystore: tuple[Path, Path], corpus_dir: Path, tmp_path: Path
) -> None:
    """`--local-ranks 2`: the node starts two rank processes (trainer.round.ranks), trains a
    round with them and writes the canonical checkpoint; a count below 1 is refused."""
    port = free_port()
    ckpts = tmp_path / "ckpt"
    result = CliRunner().invoke(app, _args(
        keystore, "--host-rendezvous", "--rendezvous", f"127.0.0.1:{port}", "--data",
        str(corpus_dir), "--checkpoint-dir", str(ckpts), "--rounds", "1", "--inner-steps", "2",
        "--batch-size", "2", "--join-window", "0", "--local-ranks", "2",
    ))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert CheckpointDir(ckpts).rounds() == [1]
    refused = CliRunner().invoke(app, _args(keystore, "--local-ranks", "0"))
    assert refused.exit_code == 2 and "--local-ranks" in refused.output, refused.output


def test_unreachable_peers_exit_5_with_a_message(keystore: tuple[Path, Path]) -> None:
    port = free_port()  # nobody hosts a rendezvous there
    result = CliRunner().invoke(app, _args(keystore, "--rendezvous", f"127.0.0.1:{port}",
                                                  "--connect-timeout", "2"),
                                env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 5, result.output
    assert "rendezvous" in result.output


def test_unreachable_chain_exits_3(keystore: tuple[Path, Path], tmp_path: Path) -> None:
    dep = tmp_path / "dep.json"
    dep.write_text("{}")
    result = CliRunner().invoke(app, _args(keystore, "--rpc-url", "http://127.0.0.1:9",
                                           "--deployment", str(dep)))  # fmt: skip
    assert result.exit_code == 3, result.output


def test_unreachable_ledger_exits_4(keystore: tuple[Path, Path]) -> None:
    result = CliRunner().invoke(app, _args(keystore, "--ledger-url", "http://127.0.0.1:9"))
    assert result.exit_code == 4, result.output
    assert "ledger" in result.output


def test_run_id_forms() -> None:
    assert parse_run_id("0x" + "ab" * 32) == bytes.fromhex("ab" * 32)
    assert len(parse_run_id("my-run")) == 32
    with pytest.raises(Exception, match="64 hex digits"):
        parse_run_id("0x1234")


def test_heartbeat_timeout_flag_reaches_the_node(keystore: tuple[Path, Path]) -> None:
    """`--heartbeat-timeout` sets how long a silent peer is waited for (collectives and round
    boundaries); a negative value is refused by the parser."""
    port = free_port()
    network = Network(rendezvous=f"127.0.0.1:{port}", host_rendezvous=True, heartbeat_timeout=2.5)
    runner = build(NodeOptions("cli-test", Identity(keystore[0], keystore[1]), network=network))
    try:
        assert runner.s.membership.heartbeat_timeout_s == 2.5
        assert runner.liveness.timeout_s == 2.5 and runner.rdv.liveness is runner.liveness
    finally:
        runner.server.close()
    result = CliRunner().invoke(app, _args(keystore, "--heartbeat-timeout", "-1"))
    assert result.exit_code == 2 and "heartbeat-timeout" in result.output, result.output


def test_the_bounded_overlap_is_the_default_and_overlap_runs_the_delayed_step(
    keystore: tuple[Path, Path],
) -> None:
    """The node's schedule (trainer.round.schedule): the bounded overlap unless ``--overlap``
    (the one-round delay, which takes precedence) or ``--no-bounded-overlap`` (lockstep)."""
    from trainer.round.bounded import Bounded
    from trainer.round.overlap import Overlap
    from trainer.round.schedule import Lockstep

    for flags, schedule in (({}, Bounded), ({"overlap": True}, Overlap),
                            ({"bounded_overlap": False}, Lockstep),
                            ({"overlap": True, "bounded_overlap": False}, Overlap)):  # fmt: skip
        network = Network(rendezvous=f"127.0.0.1:{free_port()}", host_rendezvous=True)
        options = NodeOptions("cli-test", Identity(keystore[0], keystore[1]), network=network,
                              training=Training(**flags))  # fmt: skip
        runner = build(options)
        try:
            assert type(runner.schedule) is schedule, (flags, runner.schedule)
        finally:
            runner.server.close()
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "--overlap" in shown and "--no-overlap" in shown and "[default: no-overlap]" in shown
    assert "[default: bounded-overlap]" in shown


def test_the_flags_are_the_leaves_of_the_options_tree() -> None:
    """Each leaf of NodeOptions is one flag of the command, with its default, and the parsed
    flags fill the same tree back (trainer.flags)."""
    leaves = parameters(NodeOptions)
    assert [p.name for p in leaves] == list(inspect.signature(run_command).parameters)
    defaults = {p.name: p.default for p in leaves if p.default is not inspect.Parameter.empty}
    flags = defaults | {"run_id": "r", "keystore": Path("k.json"), "min_nodes": 3}
    expected = NodeOptions("r", Identity(Path("k.json")), network=Network(min_nodes=3))
    assert fill(NodeOptions, flags) == expected
