"""What `coloco devnet up` leaves in this folder, and whether that devnet still runs.

`.coloco/devnet/` holds `anvil.pid`, `anvil.log`, `anvil-accounts.json` (anvil's funded dev keys),
`devnet.json` (RPC URL, port, chain id, pid) and, after `coloco devnet deploy`,
`deployment.json`. The devnet commands and the settings every other command resolves
(coloco_cli/common.py) read the devnet's RPC URL through the one :func:`devnet_rpc_url`, so
they never disagree on whether there is a devnet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

DEVNET_DIR = Path(".coloco") / "devnet"
DEVNET_DEPLOYMENT = DEVNET_DIR / "deployment.json"
PID_FILE = DEVNET_DIR / "anvil.pid"
STATE_FILE = DEVNET_DIR / "devnet.json"
ACCOUNTS_FILE = DEVNET_DIR / "anvil-accounts.json"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_pid() -> int | None:
    """The pid of the devnet's anvil if it is running, else None (stale pid files are removed)."""
    if not PID_FILE.is_file():
        return None
    try:
        pid = int(PID_FILE.read_text().strip())
    except ValueError:
        PID_FILE.unlink(missing_ok=True)
        return None
    if _pid_alive(pid):
        return pid
    PID_FILE.unlink(missing_ok=True)
    return None


def devnet_rpc_url() -> str | None:
    """The RPC URL `coloco devnet up` recorded in this folder, while that devnet runs.

    None when there is no devnet here, when it was stopped or its anvil died (a URL recorded
    for a dead chain is no default: `coloco devnet status` calls it down), and when the record
    is unreadable (a message and a fallback, never a traceback)."""
    if running_pid() is None:
        return None
    try:
        return str(json.loads(STATE_FILE.read_text())["rpc_url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
