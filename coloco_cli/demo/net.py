"""The demo's infrastructure: a fresh anvil, every contract deployed, the ledger on SQLite.

Everything started here is registered with the demo's `ProcessManager`, so it is stopped on
success, failure or Ctrl-C.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from coloco_cli.procs import Child, ProcessManager, wait_until
from protocol.devnet import free_port
from protocol.errors import ChainError, ConfigError, LedgerError

if TYPE_CHECKING:
    from coloco_cli.demo.shell import Shell
    from protocol.chain import ChainClient
    from protocol.deployment import Deployment
    from protocol.devnet import AnvilProcess

log = logging.getLogger(__name__)

ADMIN_TOKEN = "coloco-demo-admin-token"


@dataclass
class DemoNet:
    """Chain + deployment + ledger of one demo run."""

    workdir: Path
    anvil: AnvilProcess
    deployment: Deployment
    deployment_path: Path
    ledger_url: str
    ledger: Child
    _clients: dict[str, ChainClient] = field(default_factory=dict, repr=False)

    @property
    def rpc_url(self) -> str:
        return self.anvil.rpc_url

    def chain(self, private_key: str | None = None) -> ChainClient:
        """A chain client, sending as `private_key` if given (one client per key: one nonce)."""
        from eth_account import Account

        from protocol.chain import ChainClient

        key = private_key or ""
        if key not in self._clients:
            account = Account.from_key(private_key) if private_key else None
            self._clients[key] = ChainClient(self.rpc_url, self.deployment, account=account)
        return self._clients[key]

    def fund(self, address: str, ether: int = 10) -> None:
        """Give `address` native currency for gas (anvil cheat RPC)."""
        self.anvil.call("anvil_setBalance", [address, hex(ether * 10**18)])

    def mine(self, blocks: int) -> None:
        self.anvil.mine(blocks)

    def advance_time(self, seconds: int) -> None:
        self.anvil.increase_time(seconds)

    def ledger_get(self, path: str) -> Any:
        resp = httpx.get(f"{self.ledger_url}{path}", timeout=10.0)
        if resp.status_code != 200:
            raise LedgerError(f"ledger GET {path} answered {resp.status_code}: {resp.text[:300]}")
        return resp.json()


def attach_anvil(rpc_url: str, accounts_file: Path, workdir: Path) -> AnvilProcess:
    """An anvil this demo did not start (e.g. `coloco devnet up`): used, never stopped.

    `accounts_file` is anvil's `--config-out` JSON (`.coloco/devnet/anvil-accounts.json`).
    """
    import json
    from urllib.parse import urlparse

    from protocol.devnet import AnvilProcess, rpc_call

    try:
        cfg = json.loads(accounts_file.read_text())
        accounts = list(zip(cfg["available_accounts"], cfg["private_keys"], strict=True))
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(
            f"--accounts {accounts_file}: not anvil's --config-out JSON ({exc}); with "
            "`coloco devnet up` it is .coloco/devnet/anvil-accounts.json"
        ) from exc
    chain_id = int(rpc_call(rpc_url, "eth_chainId"), 16)
    port = urlparse(rpc_url).port or 8545
    return AnvilProcess(rpc_url, port, -1, chain_id, accounts, workdir)


def start_chain(
    procs: ProcessManager,
    workdir: Path,
    anvil: AnvilProcess | None = None,
    *,
    inner_steps: int | None = None,
) -> tuple[AnvilProcess, Deployment, Path]:
    """Start anvil (unless given one) and deploy all (deployer = account 0, committer = 1).

    `inner_steps` is the run's genesis H, set by the deployment before the Timelock owns the config.
    """
    from protocol.deploy import deploy
    from protocol.devnet import AnvilProcess

    if anvil is None:
        anvil = AnvilProcess.start(workdir / "anvil", accounts=10)
        procs.add_cleanup("anvil", anvil.stop)
    path = workdir / "deployment.json"
    deployment = deploy(
        anvil.rpc_url,
        anvil.accounts[0][1],
        committer=anvil.accounts[1][0],
        out_path=path,
        initial_inner_steps=inner_steps,
    )
    log.info("contracts deployed on %s (chain %d)", anvil.rpc_url, anvil.chain_id)
    return anvil, deployment, path


def grant_slasher(anvil: AnvilProcess, deployment: Deployment) -> str:
    """A fresh key for the ledger's slash proposals, granted StakeManager's SLASHER_ROLE by the
    Timelock (what an executed governance vote does; on the devnet the Timelock is impersonated
    to keep the demo short) and funded for gas. Returns the private key (0x hex)."""
    import os

    from eth_account import Account

    from protocol.deployment import abi

    key = "0x" + os.urandom(32).hex()
    slasher = Account.from_key(key).address
    timelock = deployment.address("TimelockController")
    anvil.call("anvil_setBalance", [slasher, hex(10**19)])
    sm = anvil.w3.eth.contract(  # type: ignore[call-overload]
        address=deployment.address("StakeManager"), abi=abi("StakeManager")
    )
    try:
        anvil.transact_as(timelock, sm, "grantRole", sm.functions.SLASHER_ROLE().call(), slasher)
    except ChainError:
        raise ConfigError("granting SLASHER_ROLE to the ledger's slasher key reverted") from None
    return key


def start_ledger(
    procs: ProcessManager,
    workdir: Path,
    anvil: AnvilProcess,
    deployment_path: Path,
    *,
    round_deadline_s: float,
    shell: Shell | None = None,
    slasher_key: str | None = None,
) -> tuple[str, Child]:
    """`coloco ledger serve` on SQLite with the committer key (its settings in COLOCO_LEDGER_*
    variables, as an operator's service file would set them); wait for /v1/health."""
    port = free_port()
    env = {
        "COLOCO_LEDGER_ENVIRONMENT": "development",
        "COLOCO_LEDGER_RPC_URL": anvil.rpc_url,
        "COLOCO_LEDGER_DEPLOYMENT": str(deployment_path),
        "COLOCO_LEDGER_COMMITTER_PRIVATE_KEY": anvil.accounts[1][1],
        "COLOCO_LEDGER_DATABASE_URL": f"sqlite:///{workdir / 'ledger.db'}",
        "COLOCO_LEDGER_BLOB_DIR": str(workdir / "ledger-blobs"),
        "COLOCO_LEDGER_ADMIN_TOKEN": ADMIN_TOKEN,
        "COLOCO_LEDGER_ROUND_DEADLINE_S": str(round_deadline_s),
        "COLOCO_LEDGER_CONFIRMATIONS": "0",
        "COLOCO_LEDGER_INDEXER_POLL_S": "0.2",
        "COLOCO_LEDGER_LIFECYCLE_POLL_S": "0.2",
        "COLOCO_LEDGER_USEFULNESS_MODEL": "tiny",  # level 2: own shard vs random data
        # long enough that the nodes started together (0.3 s apart, more on a loaded machine)
        # are all members of round 1, as the report expects of the starting nodes. A shorter one
        # is safe (a refused node is not waited for and trains from round 2: docs/trainer.md,
        # "with a ledger"), it would only credit that node from round 2
        "COLOCO_LEDGER_JOIN_WINDOW_S": "2.0",
        # level 3: 10% of node-rounds (and every suspicious one) replayed; a failed replay is a
        # fraud record and, with the slasher key, a slash proposal
        "COLOCO_LEDGER_AUDIT_FRACTION": "0.1",
    }
    if slasher_key is not None:
        env["COLOCO_LEDGER_SLASHER_PRIVATE_KEY"] = slasher_key
    from coloco_cli.demo.shell import Shell

    shell = shell or Shell(log.debug, workdir / "logs" / "commands.log")
    argv = shell.argv("ledger", "serve", "--host", "127.0.0.1", "--port", port)
    child = procs.start("ledger", argv, workdir / "logs" / "ledger.log", env=env)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=60, what=f"the ledger at {url}/v1/health", child=child)
    return url, child
