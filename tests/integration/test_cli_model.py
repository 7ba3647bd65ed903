"""`coloco model info | verify | eval` on real checkpoints: a tiny GPT trained for a few real
steps per round, each round's canonical hash committed on the real anvil, the blobs served over
HTTP from a folder as any peer serves them (`/v1/blobs/{hash}`)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.main import app
from coloco_cli.model.ops import held_out_loss, load_model
from protocol.blobs import encode_blob
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import CheckpointError
from protocol.hashing import hash_state_dict
from reference.data import Corpus
from reference.model import GPT, GPTConfig

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()
RUN = "model-run"
RUN_ID = hashlib.sha256(RUN.encode()).digest()
WORK = [0, 1000, 2000]  # verified tokens committed per round (totalWork)


@dataclass(frozen=True)
class Rounds:
    files: list[Path]  # round 0 (genesis), 1, 2
    hashes: list[bytes]
    ledger_url: str
    chain: ChainClient


def _train(model: GPT, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """`steps` real AdamW steps on the default corpus: one round's worth of a tiny run."""
    rows = Corpus.load(None).random_rows(model.cfg.seq_len, 16, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        _, loss = model(rows[:, :-1], rows[:, 1:])
        assert loss is not None
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *_: object) -> None:  # stderr is the CLI's: keep requests off it
        pass


@pytest.fixture
def rounds(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, tmp_path: Path
) -> Iterator[Rounds]:
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny"), seed=0)
    states = [{k: v.detach().clone() for k, v in model.state_dict().items()}]
    states += [_train(model, 8, seed=1), _train(model, 8, seed=2)]
    committer_key = next(k for a, k in chain.accounts if a == deployment.committer)
    committer = ChainClient(chain.rpc_url, deployment, Account.from_key(committer_key))
    served = tmp_path / "peer"
    (served / "v1" / "blobs").mkdir(parents=True)
    files, hashes = [], []
    for r, state in enumerate(states):
        digest = bytes(hash_state_dict(state))
        blob = encode_blob(state)
        (served / "v1" / "blobs" / f"0x{digest.hex()}").write_bytes(blob)
        files.append(tmp_path / f"round{r}.safetensors")
        files[-1].write_bytes(blob)
        hashes.append(digest)
        committer.transact("ContributionLedger", "commitRound", RUN_ID, r, b"\0" * 32, digest,
                           WORK[r], b"\0" * 32, 0)  # fmt: skip
    # round 1's attestations as the ledger answers them (GET /v1/runs/{run}/rounds/{round})
    rounds_dir = served / "v1" / "runs" / f"0x{RUN_ID.hex()}" / "rounds"
    rounds_dir.mkdir(parents=True)
    (rounds_dir / "1").write_text(json.dumps({"round": 1, "scores": [{"config_version": 7}]}))
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Rounds(files, hashes, f"http://127.0.0.1:{server.server_address[1]}",
                     ChainClient(chain.rpc_url, deployment))  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output.strip().splitlines()[-1])


def test_model_info_names_preset_parameters_run_round_tokens_and_config_version(
    rounds: Rounds,
) -> None:
    url = ["--ledger-url", rounds.ledger_url]
    info = _json("model", "info", str(rounds.files[2]), *url)
    assert info["checkpoint"] == "0x" + rounds.hashes[2].hex()
    assert info["preset"] == "tiny"
    assert info["parameters"] == GPT(GPTConfig.preset("tiny")).num_params()
    assert info["run_id"] == "0x" + RUN_ID.hex() and info["round"] == 2
    assert info["last_round"] == 2 and info["tokens_trained"] == WORK[1] + WORK[2]
    # no attestations served for round 2: TrainingConfig's version at its commit
    assert info["config_version"] == rounds.chain.training_config.version()
    assert info["config_version_from"] == "TrainingConfig at its commit"
    assert info["released"] is False
    first = _json("model", "info", str(rounds.files[1]), "--run", RUN, *url)
    assert first["round"] == 1 and first["tokens_trained"] == WORK[1]
    assert (first["config_version"], first["config_version_from"]) == (
        7, "the nodes' attestations"
    )  # fmt: skip
    text = " ".join(
        runner.invoke(app, ["model", "info", str(rounds.files[1]), *url]).output.split()
    )
    assert "preset tiny (n_layer 2, d_model 64, seq_len 64, vocab 256)" in text, text
    assert "round 1 (the run's last committed: 2)" in text and "tokens trained 1,000" in text
    assert "config version 7 (the nodes' attestations)" in text, text
    stranger = rounds.files[0].with_name("stranger.safetensors")
    stranger.write_bytes(encode_blob(GPT(GPTConfig.preset("tiny"), seed=9).state_dict()))
    other = _json("model", "info", str(stranger), *url)
    assert other["run_id"] is None and other["preset"] == "tiny" and other["released"] is False
    # no chain: the file's own facts, and why the rest is missing
    offline = runner.invoke(app, ["model", "info", str(rounds.files[1]), "--rpc-url",
                                  "http://127.0.0.1:9"])  # fmt: skip
    assert offline.exit_code == 0, (offline.output, offline.exception)
    text = " ".join(offline.output.split())
    assert f"hash 0x{rounds.hashes[1].hex()}" in text and "preset tiny" in text, text
    assert "run unknown: the chain was not read" in text, text


def test_model_verify_matches_the_chain_or_exits_1_naming_both_hashes(rounds: Rounds) -> None:
    ok = _json("model", "verify", str(rounds.files[1]), RUN, "--round", "1")
    assert ok["match"] is True and ok["round"] == 1
    found = _json("model", "verify", str(rounds.files[1]))  # no run: looked up by its hash
    assert found["run_id"] == "0x" + RUN_ID.hex() and found["round"] == 1
    wrong = runner.invoke(app, ["model", "verify", str(rounds.files[1]), RUN])  # the last: 2
    assert isinstance(wrong.exception, CheckpointError), wrong.output
    assert f"0x{rounds.hashes[1].hex()}" in wrong.exception.message
    assert f"0x{rounds.hashes[2].hex()}" in wrong.exception.message
    # the installed command: exit 1, both hashes on stderr, no traceback
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "coloco"), "model", "verify", str(rounds.files[0]),
         RUN, "--round", "2"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"0x{rounds.hashes[0].hex()}" in proc.stderr and f"0x{rounds.hashes[2].hex()}" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr
    text = runner.invoke(app, ["model", "verify", str(rounds.files[2]), RUN]).output
    assert f"0x{rounds.hashes[2].hex()} matches round 2 of run 0x{RUN_ID.hex()}" in " ".join(
        text.split()
    )


def test_model_eval_shows_the_previous_round_and_the_uniform_baseline(rounds: Rounds) -> None:
    url = ["--ledger-url", rounds.ledger_url]
    out = _json("model", "eval", str(rounds.files[2]), "--rows", "8", *url)
    losses = [held_out_loss(load_model(f, "tiny"), 8) for f in rounds.files]
    assert out["eval_loss"] == pytest.approx(losses[2], abs=1e-4)
    assert out["round"] == 2 and out["run_id"] == "0x" + RUN_ID.hex()
    assert out["previous"]["round"] == 1  # pulled from the peer, checked against the chain
    assert out["previous"]["eval_loss"] == pytest.approx(losses[1], abs=1e-4)
    assert out["uniform_baseline"] == pytest.approx(math.log(256), abs=1e-5)
    assert losses[1] < losses[0] < math.log(256) + 1  # real training lowered it
    text = " ".join(
        runner.invoke(
            app, ["model", "eval", str(rounds.files[2]), "--rows", "8", *url]
        ).output.split()
    )
    shown = [round(loss, 5) for loss in losses]  # as --json reports them, and the text prints
    assert f"held-out loss {shown[2]:.4f} nats/byte over 8 rows (round 2 of run 0x" in text
    word = "lower" if losses[2] < losses[1] else "higher"
    assert f"previous (round 1): {shown[1]:.4f} nats/byte, this one {word} by" in text, text
    assert "uniform bytes baseline: 5.5452 nats/byte (ln 256" in text, text
    genesis = _json("model", "eval", str(rounds.files[0]), "--rows", "8", *url)
    assert genesis["previous"] is None and "genesis" in genesis["previous_unknown"]
    given = _json("model", "eval", str(rounds.files[2]), "--rows", "8", "--previous",
                  str(rounds.files[0]), *url)  # fmt: skip
    assert given["previous"]["eval_loss"] == pytest.approx(losses[0], abs=1e-4)
