"""A local anvil chain as an object: start on a free 127.0.0.1 port, snapshot, revert, mine, stop.

Used by the test harness and by `coloco devnet up` / `coloco demo`. The process runs in its own
process group and is stopped by its pid; its funded accounts are read from anvil's `--config-out`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from web3 import Web3

from protocol.errors import ChainError, RpcUnavailableError
from protocol.toolchain import foundry_bin

log = logging.getLogger(__name__)

DEFAULT_CHAIN_ID = 31337


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def rpc_call(
    rpc_url: str, method: str, params: list[Any] | None = None, timeout: float = 10.0
) -> Any:
    """One JSON-RPC call; raises ChainError on an RPC error, RpcUnavailableError if unreachable."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
    try:
        resp = httpx.post(rpc_url, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise RpcUnavailableError(
            f"RPC {rpc_url} unreachable ({exc.__class__.__name__}): is the chain running? "
            "Start one with `coloco devnet up`."
        ) from exc
    payload = resp.json()
    if "error" in payload:
        raise ChainError(f"RPC {method} failed: {payload['error']}")
    return payload["result"]


@dataclass
class AnvilProcess:
    """A running anvil. Create with :meth:`start`; stop with :meth:`stop` (idempotent)."""

    rpc_url: str
    port: int
    pid: int
    chain_id: int
    accounts: list[tuple[str, str]]
    workdir: Path
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _w3: Web3 | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        workdir: Path,
        *,
        port: int | None = None,
        chain_id: int = DEFAULT_CHAIN_ID,
        accounts: int = 10,
        block_time: float | None = None,
        startup_timeout: float = 30.0,
        detach: bool = False,
    ) -> AnvilProcess:
        """Start anvil on 127.0.0.1 and wait until it answers `eth_chainId`."""
        workdir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        config_out = workdir / "anvil-accounts.json"
        config_out.unlink(missing_ok=True)
        cmd = [
            str(foundry_bin("anvil")),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--chain-id",
            str(chain_id),
            "--accounts",
            str(accounts),
            "--balance",
            "1000000",
            "--config-out",
            str(config_out),
        ]
        if block_time is not None:
            cmd += ["--block-time", str(block_time)]
        log_file = (workdir / "anvil.log").open("ab")
        proc = subprocess.Popen(
            cmd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_file.close()
        rpc_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                tail = (workdir / "anvil.log").read_text(errors="replace")[-2000:]
                raise ChainError(f"anvil exited with {proc.returncode} on port {port}:\n{tail}")
            try:
                rpc_call(rpc_url, "eth_chainId", timeout=1.0)
                if config_out.exists() and config_out.stat().st_size > 0:
                    break
            except RpcUnavailableError:
                pass
            if time.monotonic() > deadline:
                proc.kill()
                raise ChainError(f"anvil did not answer on {rpc_url} within {startup_timeout}s")
            time.sleep(0.05)
        cfg = json.loads(config_out.read_text())
        pairs = [
            (str(Web3.to_checksum_address(addr)), str(key))
            for addr, key in zip(cfg["available_accounts"], cfg["private_keys"], strict=True)
        ]
        (workdir / "anvil.pid").write_text(str(proc.pid))
        log.info("anvil started pid=%s rpc=%s", proc.pid, rpc_url)
        return cls(
            rpc_url=rpc_url,
            port=port,
            pid=proc.pid,
            chain_id=chain_id,
            accounts=pairs,
            workdir=workdir,
            _proc=None if detach else proc,
        )

    @property
    def w3(self) -> Web3:
        """A web3 connected to this chain (one per process object)."""
        if self._w3 is None:
            self._w3 = Web3(Web3.HTTPProvider(self.rpc_url, request_kwargs={"timeout": 30}))
        return self._w3

    def call(self, method: str, params: list[Any] | None = None) -> Any:
        return rpc_call(self.rpc_url, method, params)

    def snapshot(self) -> str:
        return str(self.call("evm_snapshot"))

    def revert(self, snapshot_id: str) -> None:
        if not self.call("evm_revert", [snapshot_id]):
            raise ChainError(f"evm_revert({snapshot_id}) refused: snapshot unknown or already used")

    def mine(self, blocks: int = 1) -> None:
        self.call("anvil_mine", [hex(blocks)])

    def increase_time(self, seconds: int) -> None:
        self.call("evm_increaseTime", [seconds])
        self.mine(1)

    def block_number(self) -> int:
        return int(self.call("eth_blockNumber"), 16)

    def transact_as(self, sender: str, contract: Any, fn: str, *args: Any) -> dict[str, Any]:
        """Send ``contract.functions.fn(*args)`` from ``sender`` without its key (anvil
        impersonates it and funds its gas; a devnet's stand-in for, say, the Timelock executing
        a vote) and return the mined receipt; ChainError when the call reverts."""
        self.call("anvil_impersonateAccount", [sender])
        try:
            self.call("anvil_setBalance", [sender, hex(10**19)])
            tx = getattr(contract.functions, fn)(*args).transact({"from": sender})
            receipt = dict(self.w3.eth.wait_for_transaction_receipt(tx))
        finally:
            self.call("anvil_stopImpersonatingAccount", [sender])
        if receipt["status"] != 1:
            raise ChainError(f"{fn}{args} from {sender} reverted")
        return receipt

    def __enter__(self) -> AnvilProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process group by pid; wait until it is gone."""
        stop_pid(self.pid, timeout=timeout)
        if self._proc is not None:
            self._proc.wait(timeout=timeout)
        (self.workdir / "anvil.pid").unlink(missing_ok=True)


def stop_pid(pid: int, *, timeout: float = 10.0) -> None:
    """SIGTERM a process group led by `pid`, then SIGKILL it if it lingers."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
