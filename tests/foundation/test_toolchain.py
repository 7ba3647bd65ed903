"""The toolchain the project installs for itself: the CLI, the solc wrapper, Foundry from npm."""

from __future__ import annotations

import json
import subprocess
import sys

from protocol.toolchain import REPO_ROOT, foundry_bin

SOLC = REPO_ROOT / "tools" / "solc"


def test_coloco_help_lists_command_groups() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "coloco_cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for group in ("keys", "node", "rewards", "gov", "devnet", "ledger", "demo"):
        assert group in out, f"`coloco --help` does not list {group}"


def test_the_command_tree_loads_without_torch() -> None:
    """torch costs about 1.2 s of every `coloco` start; only the commands that compute import it
    (node run, audit's replay, model, run open), when they run."""
    probe = "import sys, coloco_cli.main; print(sorted(m for m in sys.modules if m == 'torch'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", "the command tree imports torch at start-up"


def test_cli_usage_error_is_a_message_and_exit_2_not_a_traceback() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "coloco_cli", "node", "stake"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "Missing option" in out.stderr
    assert "Traceback" not in out.stderr


def test_solc_wrapper_answers_version_in_native_format() -> None:
    out = subprocess.run([str(SOLC), "--version"], capture_output=True, text=True, check=True)
    assert "Version: 0.8.37+commit." in out.stdout
    assert out.stdout.strip().endswith(".Linux.g++")


def test_solc_wrapper_compiles_standard_json_with_imports(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "A.sol").write_text("pragma solidity ^0.8.0; contract A { uint x = 1; }")
    source = 'pragma solidity ^0.8.0; import "lib/A.sol"; contract B is A {}'
    request = {
        "language": "Solidity",
        "sources": {"B.sol": {"content": source}},
        "settings": {"outputSelection": {"*": {"*": ["evm.bytecode.object"]}}},
    }
    out = subprocess.run(
        [str(SOLC), "--standard-json", "--base-path", str(tmp_path)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout)
    assert not [e for e in result.get("errors", []) if e["severity"] == "error"]
    assert result["contracts"]["B.sol"]["B"]["evm"]["bytecode"]["object"]


def test_solc_wrapper_refuses_unknown_flags() -> None:
    out = subprocess.run([str(SOLC), "--bin", "x.sol"], capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert "unsupported argument --bin" in out.stderr


def test_foundry_binaries_come_from_npm() -> None:
    for tool in ("forge", "anvil", "cast"):
        path = foundry_bin(tool)
        assert "node_modules" in str(path)
        version = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, check=True
        )
        assert "1.7.1" in version.stdout
