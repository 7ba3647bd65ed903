"""Is a process still there? (Zombies count as gone: they hold no port and run no code.)"""

from __future__ import annotations

import os
import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    """True once `pid` is gone (within `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False
