"""Where the project's own tools live: the repository root and the Foundry binaries from npm."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

from protocol.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def foundry_bin(tool: str) -> Path:
    """Path of `forge`, `anvil` or `cast`.

    Order: $COLOCO_FOUNDRY_BIN/<tool>, the native binary that npm put under node_modules, then PATH.
    """
    override = os.environ.get("COLOCO_FOUNDRY_BIN")
    if override:
        candidate = Path(override) / tool
        if candidate.is_file():
            return candidate
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    candidate = REPO_ROOT / "node_modules" / "@foundry-rs" / f"{tool}-linux-{arch}" / "bin" / tool
    if candidate.is_file():
        return candidate
    found = shutil.which(tool)
    if found:
        return Path(found)
    raise ConfigError(
        f"{tool} (Foundry) not found: run `make setup` (npm ci installs it under node_modules/) "
        f"or set COLOCO_FOUNDRY_BIN to the folder that holds it"
    )


def forge_out_dir() -> Path:
    """forge's artifact folder (`out/` at the repository root, see foundry.toml)."""
    return Path(os.environ.get("COLOCO_FORGE_OUT", REPO_ROOT / "out"))
