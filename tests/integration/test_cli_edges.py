"""Errors an operator meets every day, each saying what is wrong and what to do (issue 28):
a --ledger-url that points at a chain's RPC, a secret prompt without a terminal, an account
that exists already. Each runs `coloco` as a real process (its exit code is the point)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess

pytestmark = [pytest.mark.integration]


def coloco(*args: str, home: Path, stdin: int | None = subprocess.DEVNULL):
    """`coloco ARGS` in a session of its own (no controlling terminal), stdin from /dev/null."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLOCO_")}
    env["COLOCO_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "coloco_cli", *args], cwd=home, env=env, stdin=stdin,
        capture_output=True, text=True, check=False, timeout=120, start_new_session=True,
    )  # fmt: skip


@pytest.mark.anvil
def test_ledger_url_at_the_chain_rpc_says_it_is_not_a_coloco_ledger(
    anvil: AnvilProcess, deployment: Deployment, tmp_path: Path
) -> None:
    dep = tmp_path / "deployment.json"
    deployment.save(dep)
    shown = coloco("rewards", "show", anvil.accounts[2][0], "--rpc-url", anvil.rpc_url,
                   "--deployment", str(dep), "--ledger-url", anvil.rpc_url,
                   home=tmp_path)  # fmt: skip
    assert shown.returncode == 1, shown.stderr
    said = " ".join(shown.stderr.split())
    assert f"{anvil.rpc_url} is not a coloco ledger" in said, said
    assert "not the chain's RPC" in said and "nothing to claim" not in said


def test_keystore_prompt_without_a_terminal_exits_1_naming_password_file(tmp_path: Path) -> None:
    made = coloco("keys", "new", "--name", "ops", "--light-kdf", home=tmp_path)
    said = " ".join(made.stderr.split())
    assert made.returncode == 1, (made.returncode, said)  # not 130, Ctrl-C's code
    assert "no terminal" in said and "--password-file" in said and "aborted" not in said, said
    assert not (tmp_path / "keys" / "ops.json").exists()


def test_keystore_overwrite_names_the_force_flag(tmp_path: Path) -> None:
    pw = tmp_path / "pw.txt"
    pw.write_text("pw\n")
    args = ("keys", "new", "--name", "ops", "--light-kdf", "--password-file", str(pw))
    assert coloco(*args, home=tmp_path).returncode == 0
    again = coloco(*args, home=tmp_path)
    said = " ".join(again.stderr.split())
    assert again.returncode == 1 and "already exists" in said and "--force" in said, said
    assert coloco(*args, "--force", home=tmp_path).returncode == 0
