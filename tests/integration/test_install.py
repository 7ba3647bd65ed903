"""An installed `coloco` works outside the repository: the ABIs ship as package data.

The wheel is built from this checkout and installed into a scratch folder (dependencies come from
the test's own environment); `coloco` then runs from another folder, where no `out/` exists, and
reads the session's chain with the shipped ABIs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.deployment import SHIPPED_ABI_DIR
from protocol.devnet import AnvilProcess
from protocol.toolchain import forge_out_dir

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_abis_match_the_forge_artifacts() -> None:
    """protocol/abi/*.json is what forge builds (`make setup` copies them after `forge build`)."""
    shipped = sorted(SHIPPED_ABI_DIR.glob("*.json"))
    assert len(shipped) == 7
    for path in shipped:
        name = path.stem
        artifact = json.loads((forge_out_dir() / f"{name}.sol" / f"{name}.json").read_text())
        assert json.loads(path.read_text()) == artifact["abi"], f"{path} is stale: copy it again"


@pytest.mark.anvil
def test_installed_coloco_reads_the_chain_outside_the_repository(
    anvil: AnvilProcess, deployment: object, tmp_path: Path
) -> None:
    wheels, site, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("coloco-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    dep = elsewhere / "deployment.json"
    deployment.save(dep)  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLOCO_")}
    env["PYTHONPATH"] = str(site)  # ahead of the checkout's editable install
    run = [sys.executable, "-m", "coloco_cli"]
    where = subprocess.run(
        [sys.executable, "-c", "import coloco_cli, protocol; print(coloco_cli.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(site)), where.stdout
    version = subprocess.run(
        [*run, "--version"], cwd=elsewhere, env=env, capture_output=True, text=True, check=False
    )
    assert version.returncode == 0 and version.stdout.startswith("coloco "), version.stderr
    listed = subprocess.run(
        [*run, "run", "list", "--rpc-url", anvil.rpc_url, "--deployment", str(dep), "--json"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "runs" in json.loads(listed.stdout.strip().splitlines()[-1])
    assert not (site / "out").exists()
    for name in ("ledger/dashboard/templates/index.html", "ledger/dashboard/static/live.js",
                 "protocol/abi/TrainingConfig.json"):  # fmt: skip
        assert (site / name).is_file(), name
