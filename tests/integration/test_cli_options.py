"""The command tree keeps its promises to scripts: every command that reports takes --json, and
every command that sends a transaction takes the one sender option set (coloco_cli/tx.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from typer.main import get_command

from coloco_cli.main import app
from protocol.devnet import free_port

# long-running: they report through logs, `node run --events PATH` and `demo --report PATH`
SERVERS = {"demo", "node run", "ledger serve", "rendezvous serve"}
SENDER = {
    "--rpc-url", "--ledger-url", "--deployment", "--account", "--keystore", "--password-file",
    "--private-key", "--gas-limit", "--confirmations", "--no-wait", "--json",
}  # fmt: skip
SENDING = {
    "node register", "node stake", "node unstake", "node withdraw", "rewards claim",
    "fund open", "fund deposit", "fund claim", "fund refund", "code submit", "code approve",
    "code propose", "code reject", "code claim", "gov delegate", "gov propose", "gov vote",
    "gov queue", "gov execute", "slash report", "slash propose", "slash veto", "slash execute",
    "market lease open", "market lease claim", "market lease refund",
}  # fmt: skip
# they sign a message for the ledger, no transaction (coloco_cli.tx.signs): the sender's key
# options without the transaction's
SIGNER = SENDER - {"--gas-limit", "--confirmations", "--no-wait"}
SIGNING = {"market offer"}


def _commands() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
            return
        out[" ".join(path)] = {o for p in cmd.params for o in getattr(p, "opts", [])}

    walk(get_command(app), [])
    return out


def test_every_reporting_command_takes_json() -> None:
    commands = _commands()
    assert len(commands) >= 50 and set(commands) >= SERVERS
    missing = sorted(c for c, opts in commands.items() if c not in SERVERS and "--json" not in opts)
    assert missing == []


def test_every_sending_command_takes_the_one_sender_option_set() -> None:
    commands = _commands()
    senders = {c for c, opts in commands.items() if "--private-key" in opts}
    assert senders == SENDING | SIGNING  # a new sending command joins the list (and @sends)
    for name in sorted(senders):
        wanted = SIGNER if name in SIGNING else SENDER
        assert commands[name] >= wanted, (name, sorted(wanted - commands[name]))


def _coloco(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLOCO_")}
    return subprocess.run(
        [sys.executable, "-m", "coloco_cli", *args], capture_output=True, text=True, env=env,
        check=False, timeout=120,
    )  # fmt: skip


def test_errors_exit_1_usage_errors_2_never_a_traceback() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    run = "0x" + "ab" * 32
    node = "0x" + "11" * 20
    usage = [("slash", "status", "0"), ("node", "stake", "--node", node, "--confirmations", "0"),
             ("audit", "--run-id", run, "--json", "--fraction")]  # fmt: skip
    for args in usage:
        out = _coloco(*args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr)
    errors = {
        ("slash", "status", "1", "--rpc-url", dead): "rpc_unavailable",
        ("audit", "--run-id", "0x12"): "config_error",
        ("audit", "--run-id", run, "--fraction", "2"): "config_error",
        ("fund", "deposit", run, "inf", "--private-key", "0x" + "11" * 32): "config_error",
    }
    for args, code in errors.items():
        out = _coloco(*args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert f"error ({code})" in out.stderr and "Traceback" not in out.stderr, out.stderr
