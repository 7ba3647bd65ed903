"""Options every command shares: RPC URL, ledger URL, deployment JSON, signing key.

Each value comes from, in order: the command-line flag, the environment (`COLOCO_RPC_URL`,
`COLOCO_LEDGER_URL`, `COLOCO_DEPLOYMENT`, `COLOCO_KEYSTORE`, `COLOCO_PASSWORD_FILE`,
`COLOCO_PRIVATE_KEY`), a TOML config file (`$COLOCO_CONFIG`, else `./coloco.toml`, else
`~/.config/coloco/config.toml`; keys `rpc_url`, `ledger_url`, `deployment`, `keystore`,
`password_file`), then the defaults: the RPC URL `coloco devnet up` recorded while that devnet
runs (coloco_cli/devnet/state.py), the deployment for the connected chain id (the devnet's, else
`deployments/<chainId>.json`), the local ledger.
`COLOCO_KEYSTORE` is always the keystore of a transaction's sender; a node's hot key for
`coloco node run` is `COLOCO_NODE_KEYSTORE`.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from coloco_cli.devnet.state import DEVNET_DEPLOYMENT, devnet_rpc_url
from protocol.errors import ConfigError, ContractRevertError, DeploymentError

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from protocol.deployment import Deployment

console = Console()

DEFAULT_RPC_URL = "http://127.0.0.1:8545"
DEFAULT_LEDGER_URL = "http://127.0.0.1:8000"
CONFIG_KEYS = frozenset({"rpc_url", "ledger_url", "deployment", "keystore", "password_file"})

RpcUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--rpc-url", envvar="COLOCO_RPC_URL", help=f"Chain RPC (default {DEFAULT_RPC_URL})."
    ),
]
LedgerUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--ledger-url",
        envvar="COLOCO_LEDGER_URL",
        help=f"Ledger API (default {DEFAULT_LEDGER_URL}).",
    ),
]
DeploymentOpt = Annotated[
    Path | None,
    typer.Option(
        "--deployment",
        envvar="COLOCO_DEPLOYMENT",
        help="Deployment JSON (default: the devnet's, else deployments/<chainId>.json).",
    ),
]
KeystoreOpt = Annotated[
    Path | None,
    typer.Option(
        "--keystore", envvar="COLOCO_KEYSTORE", help="Encrypted keystore JSON of the sender."
    ),
]
PasswordFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--password-file",
        envvar="COLOCO_PASSWORD_FILE",
        help="File holding the keystore password (or set COLOCO_PASSWORD; else you are asked).",
    ),
]
PrivateKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--private-key",
        envvar="COLOCO_PRIVATE_KEY",
        help="Raw 0x private key of the sender (devnet only; prefer --keystore).",
        show_default=False,
    ),
]


def config_file() -> Path | None:
    """The config file in effect, or None."""
    explicit = os.environ.get("COLOCO_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"COLOCO_CONFIG={explicit} does not exist: fix the path or unset it")
        return path
    for candidate in (Path("coloco.toml"), Path.home() / ".config" / "coloco" / "config.toml"):
        if candidate.is_file():
            return candidate
    return None


def load_config() -> dict[str, Any]:
    """The config file's values (empty without a file); unknown keys are refused."""
    path = config_file()
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    section = data.get("coloco", data)
    unknown = set(section) - CONFIG_KEYS - {"coloco"}
    if unknown:
        raise ConfigError(
            f"config file {path} has unknown key(s) {sorted(unknown)}; "
            f"allowed: {sorted(CONFIG_KEYS)}"
        )
    return {k: v for k, v in section.items() if k in CONFIG_KEYS}


@dataclass(frozen=True)
class Endpoints:
    """Where the chain, the ledger and the deployment are (see `resolve`)."""

    rpc_url: str
    ledger_url: str
    explicit_deployment: Path | None = None

    @property
    def deployment_path(self) -> Path:
        """The flag/env/config deployment, else the default for the connected chain's id."""
        if self.explicit_deployment is not None:
            return self.explicit_deployment
        return default_deployment(self.rpc_url)

    def deployment(self) -> Deployment:
        from protocol.deployment import Deployment

        path = self.deployment_path
        if not path.is_file():
            raise DeploymentError(
                f"no deployment JSON at {path}: pass --deployment PATH, set "
                "COLOCO_DEPLOYMENT, or on a devnet run `coloco devnet up && coloco devnet deploy`"
            )
        return Deployment.load(path)


def chain_id_of(rpc_url: str) -> int:
    """The chain id the RPC answers (one `eth_chainId`); RpcUnavailableError if it does not."""
    from protocol.devnet import rpc_call
    from protocol.errors import RpcUnavailableError

    try:
        return int(rpc_call(rpc_url, "eth_chainId"), 16)
    except Exception as exc:
        raise RpcUnavailableError(
            f"RPC {rpc_url} does not answer ({exc.__class__.__name__}): start the chain (on a "
            "devnet `coloco devnet up`) or pass --rpc-url / set COLOCO_RPC_URL"
        ) from None


def default_deployment(rpc_url: str) -> Path:
    """The deployment for the chain at `rpc_url`: the devnet's own when it is that chain, else
    `deployments/<chainId>.json` (in this folder, else the copy shipped with the package)."""
    chain_id = chain_id_of(rpc_url)
    if DEVNET_DEPLOYMENT.is_file():
        import json

        try:
            if int(json.loads(DEVNET_DEPLOYMENT.read_text())["chain_id"]) == chain_id:
                return DEVNET_DEPLOYMENT
        except (OSError, ValueError, KeyError, TypeError):
            pass
    local = Path("deployments") / f"{chain_id}.json"
    if local.is_file():
        return local
    shipped = Path(__file__).resolve().parent / "deployments" / f"{chain_id}.json"
    return shipped if shipped.is_file() else local


def resolve(
    rpc_url: str | None = None, ledger_url: str | None = None, deployment: Path | None = None
) -> Endpoints:
    """One resolution for every command: the flag, then the environment (typer merges the two),
    then the config file, then the defaults: the running devnet's recorded RPC URL (else
    http://127.0.0.1:8545), the deployment for the connected chain id, the local ledger."""
    cfg = load_config()
    dep = deployment or (Path(cfg["deployment"]) if "deployment" in cfg else None)
    return Endpoints(
        rpc_url=rpc_url or cfg.get("rpc_url") or devnet_rpc_url() or DEFAULT_RPC_URL,
        ledger_url=(ledger_url or cfg.get("ledger_url") or DEFAULT_LEDGER_URL).rstrip("/"),
        explicit_deployment=dep,
    )


AccountOpt = Annotated[
    str | None,
    typer.Option(
        "--account",
        envvar="COLOCO_ACCOUNT",
        help="Named account of the sender (`coloco keys list`): its keystore in the keys folder.",
    ),
]


def keys_dir() -> Path:
    """Where named accounts live: `$COLOCO_HOME/keys`, default `~/.config/coloco/keys`."""
    home = os.environ.get("COLOCO_HOME")
    return (Path(home) if home else Path.home() / ".config" / "coloco") / "keys"


def account_path(name: str) -> Path:
    """The keystore of named account `name` (letters, digits, '-', '_', '.')."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ConfigError(
            f"account name {name!r}: use letters, digits, '-', '_' or '.' (at most 64)"
        )
    return keys_dir() / f"{name}.json"


def load_signer(
    keystore: Path | None,
    password_file: Path | None,
    private_key: str | None,
    account: str | None = None,
) -> LocalAccount:
    """The account that signs transactions: a named account or keystore, or a raw devnet key."""
    from eth_account import Account

    cfg = load_config()
    if account is not None:
        if keystore is not None or private_key is not None:
            raise ConfigError("pass one sender: --account, --keystore or --private-key")
        keystore = account_path(account)
        if not keystore.is_file():
            raise ConfigError(
                f"no account named {account!r} (no {keystore}): see `coloco keys list`, or "
                f"create it with `coloco keys new --name {account}`"
            )
    if keystore is None and private_key is None and "keystore" in cfg:
        keystore = Path(cfg["keystore"])
        password_file = password_file or (
            Path(cfg["password_file"]) if "password_file" in cfg else None
        )
    if keystore is not None:
        from protocol.keys import load_keystore_account

        loaded: LocalAccount = load_keystore_account(keystore, password_file=password_file)
        return loaded
    if private_key is not None:
        try:
            raw: LocalAccount = Account.from_key(private_key)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                "--private-key / COLOCO_PRIVATE_KEY is not a 32-byte hex key: check the value"
            ) from exc
        return raw
    raise ConfigError(
        "this command sends a transaction and needs a sender: pass --account NAME (create one "
        "with `coloco keys new --name NAME`), --keystore PATH or, on a devnet, --private-key 0x..."
    )


@contextlib.contextmanager
def explained_revert(hints: Mapping[str, str], what: str | None = None) -> Iterator[None]:
    """A revert inside the block is raised again as `[<what> reverted: ]<error>(args): <hint>`,
    keeping its custom error's name and arguments (scripts and tests match on those)."""
    try:
        yield
    except ContractRevertError as exc:
        if what is None and (exc.error_name or "") not in hints:
            raise  # nothing to add (it may carry a hint already)
        text = revert_hint(exc, hints)
        raise ContractRevertError(
            f"{what} reverted: {text}" if what else text,
            error_name=exc.error_name,
            error_args=exc.error_args,
            error_arg_names=exc.error_arg_names,
        ) from exc


def revert_hint(exc: ContractRevertError, hints: Mapping[str, str]) -> str:
    """A message for a reverted transaction: the hint for its custom error, else the raw reason."""
    name = exc.error_name or ""
    hint = hints.get(name)
    args = ", ".join(show_error_args(exc))
    base = f"{name}({args})" if name else exc.message
    return f"{base}: {hint}" if hint else base


def show_error_args(exc: ContractRevertError) -> list[str]:
    """A custom error's arguments as a person reads them (protocol.reverts.show_args)."""
    from protocol.reverts import show_args

    return show_args(exc.error_arg_names, exc.error_args)


def parse_amount(text: str, *, what: str = "amount") -> int:
    """'1.5' or '1.5ether' -> wei; '100wei' or '100 wei' -> 100; 'gwei' suffix too."""
    from decimal import Decimal, InvalidOperation

    raw = text.strip().lower().replace(" ", "")
    units = {"ether": 10**18, "eth": 10**18, "gwei": 10**9, "wei": 1}
    scale = 10**18
    for suffix, factor in units.items():
        if raw.endswith(suffix):
            raw, scale = raw[: -len(suffix)], factor
            break
    try:
        value = Decimal(raw) * scale
    except InvalidOperation as exc:
        raise ConfigError(
            f"{what} {text!r} is not a number: write e.g. 1.5 (ether) or 100wei"
        ) from exc
    if not value.is_finite():
        raise ConfigError(f"{what} {text!r} is not a finite number: write e.g. 1.5 (ether)")
    if value < 0 or value != value.to_integral_value():
        raise ConfigError(f"{what} {text!r} must be a non-negative whole number of wei")
    return int(value)


def fmt_units(value: int, decimals: int = 18) -> str:
    """123400000000000000 -> '0.1234'."""
    whole, frac = divmod(value, 10**decimals)
    text = f"{whole}.{frac:0{decimals}d}".rstrip("0").rstrip(".")
    return text or "0"


JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON object on stdout (for scripts).")
]

JS_SAFE_INT = (1 << 53) - 1


def json_safe(value: Any) -> Any:
    """`value` with integers beyond 2^53 - 1 as decimal strings (JavaScript reads them exactly)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value) if abs(value) > JS_SAFE_INT else value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, Path):
        return str(value)
    return value


def emit_json(data: Any) -> None:
    """One JSON line on stdout: what a `--json` command prints (nothing else goes to stdout)."""
    import json

    typer.echo(json.dumps(json_safe(data), sort_keys=True))
