"""An installed `coloco` works outside the repository: the wheel ships every ABI, the ledger's
migrations and the dashboard, and its commands run from a fresh virtual environment.

The wheel is built from this checkout and installed (no network, no dependencies resolved) into a
new venv in a scratch folder; the venv reaches the test environment's packages through one `.pth`
line (never the checkout: that line names no folder with `.pth` files of its own, so the editable
install of this checkout stays out). `coloco` then runs from another folder, where no `out/` and no
`contracts/` exist, against the session's anvil and its deployed contracts.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from protocol.deployment import SHIPPED_ABI_DIR, SHIPPED_CONTRACTS, Deployment
from protocol.devnet import AnvilProcess, free_port
from protocol.toolchain import forge_out_dir

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
CODE = ("protocol", "ledger", "trainer", "coloco_cli", "reference")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    elsewhere: Path
    env: dict[str, str]

    def coloco(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "coloco"), *args], cwd=self.elsewhere, env=self.env,
            capture_output=True, text=True, check=False, timeout=timeout,
        )  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel of this checkout in a fresh venv outside it (its `bin/coloco` console script)."""
    base = tmp_path_factory.mktemp("install")
    wheels, venv, elsewhere = base / "wheels", base / "venv", base / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("coloco-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLOCO_")}
    env.pop("PYTHONPATH", None)  # the tests' own run puts the checkout there
    env.pop("VIRTUAL_ENV", None)
    subprocess.run(
        [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index",
         str(wheel)],
        check=True, timeout=300, capture_output=True, env=env,
    )  # fmt: skip
    # then the test environment's packages (torch, web3, ...) after the venv's own: no network
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv)}))
    (site / "test-env-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return Installed(wheel, venv, elsewhere, env)


def _names_loaded_by_name() -> set[str]:
    """Every contract the code loads by its name: `contract("X")`, `abi("X")`, `call("X", ...)`,
    `transact("X", ...)`, `CONTRACT = "X"`, `FUNDING_CONTRACTS = (...)`, read from the source."""
    names: set[str] = set()
    loaders = {"contract", "abi", "call", "transact", "send", "outputs", "returned", "address"}
    for package in CODE:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and node.args:
                    fn = node.func
                    called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                    first = node.args[0]
                    if called in loaders and isinstance(first, ast.Constant):
                        names.add(str(first.value))
                elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id in ("CONTRACT", "FUNDING_CONTRACTS")
                    for t in node.targets
                ):
                    for value in ast.walk(node.value):
                        if isinstance(value, ast.Constant) and isinstance(value.value, str):
                            names.add(value.value)
    contracts = {p.name.removesuffix(".sol") for p in forge_out_dir().glob("*.sol")}
    return names & contracts


def test_wheel_ships_every_abi_the_code_loads_by_name() -> None:
    """A contract the CLI or the ledger loads by name has its ABI in protocol/abi and the wheel's
    list, equal to forge's artifact (`make setup` copies them after `forge build`)."""
    loaded = _names_loaded_by_name()
    assert {"RunFunding", "CodeRegistry", "StakeManager", "TrainingConfig"} <= loaded, loaded
    assert loaded <= set(SHIPPED_CONTRACTS), f"not shipped: {loaded - set(SHIPPED_CONTRACTS)}"
    shipped = sorted(SHIPPED_ABI_DIR.glob("*.json"))
    assert {p.stem for p in shipped} == set(SHIPPED_CONTRACTS)
    for path in shipped:
        name = path.stem
        artifact = json.loads((forge_out_dir() / f"{name}.sol" / f"{name}.json").read_text())
        assert json.loads(path.read_text()) == artifact["abi"], f"{path} is stale: copy it again"


@pytest.mark.anvil
def test_wheel_ships_every_contract_of_a_deployment(
    installed: Installed, deployment: Deployment
) -> None:
    """Whatever the deploy script writes into a deployment has its ABI inside the wheel."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        inside = set(wheel.namelist())
    for name in deployment.contracts:
        assert f"protocol/abi/{name}.json" in inside, f"the wheel lacks the ABI of {name}"
    for name in ("ledger/dashboard/templates/index.html", "ledger/dashboard/static/live.js",
                 "ledger/migrations/env.py"):  # fmt: skip
        assert name in inside, name


@contextmanager
def _ledger(installed: Installed, anvil: AnvilProcess, dep: Path) -> Iterator[str]:
    port = free_port()
    work = installed.elsewhere / "ledger"
    work.mkdir()
    env = {
        **installed.env,
        "COLOCO_LEDGER_ENVIRONMENT": "development",
        "COLOCO_LEDGER_RPC_URL": anvil.rpc_url,
        "COLOCO_LEDGER_DEPLOYMENT": str(dep),
        "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY": anvil.accounts[1][1],
        "COLOCO_LEDGER_DATABASE_URL": f"sqlite:///{work / 'ledger.db'}",
        "COLOCO_LEDGER_BLOB_DIR": str(work / "blobs"),
        "COLOCO_LEDGER_ADMIN_TOKEN": "wheel-test-admin-token-0123456789",
    }
    log = work / "ledger.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(installed.venv / "bin" / "coloco"), "ledger", "serve", "--port", str(port)],
            cwd=installed.elsewhere, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (
                f"ledger exited {proc.returncode}: {log.read_text()[-3000:]}"
            )
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"ledger never answered: {log.read_text()[-3000:]}"
            time.sleep(0.2)
        yield url
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.anvil
def test_wheel_runs_ledger_fund_and_code_outside_the_checkout(
    installed: Installed, chain: AnvilProcess, deployment: Deployment
) -> None:
    anvil = chain
    dep = installed.elsewhere / "deployment.json"
    deployment.save(dep)
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c",
         "import coloco_cli; print(coloco_cli.__file__)"],
        cwd=installed.elsewhere, env=installed.env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(installed.venv)), where.stdout
    version = installed.coloco("--version")
    assert version.returncode == 0 and version.stdout.startswith("coloco "), version.stderr
    on = ["--rpc-url", anvil.rpc_url, "--deployment", str(dep), "--json"]
    listed = installed.coloco("run", "list", *on)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "runs" in json.loads(listed.stdout.strip().splitlines()[-1])
    opened = installed.coloco("fund", "open", "demo", "--private-key", anvil.accounts[1][1], *on)
    assert opened.returncode == 0, opened.stderr[-2000:]  # the committer organises the run
    funding = installed.coloco("fund", "status", "demo", *on)
    assert funding.returncode == 0, funding.stderr[-2000:]
    assert "deposited" in funding.stdout, funding.stdout
    code = installed.coloco("code", "list", *on)
    assert code.returncode == 0, code.stderr[-2000:]
    assert json.loads(code.stdout.strip().splitlines()[-1]) == []
    with _ledger(installed, anvil, dep) as url:
        health = httpx.get(f"{url}/v1/health", timeout=5).json()
        assert health, health
    assert not (installed.venv / "out").exists() and not (installed.elsewhere / "out").exists()


def test_wheel_readme_puts_coloco_on_path() -> None:
    """README's block that puts `coloco` on PATH runs as written in a shell whose PATH lacks it."""
    text = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```bash\n")[1:]]
    (block,) = [b for b in blocks if "source .venv/bin/activate" in b]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "coloco").exists()
    )
    absent = subprocess.run(["bash", "-c", "command -v coloco"], env=env, check=False)
    assert absent.returncode != 0, "coloco is on PATH already: the README's lines prove nothing"
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env,
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.count("coloco ") == 2, ran.stdout
