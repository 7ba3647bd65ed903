"""`coloco keys new | import | list | show`: named accounts and node keys (encrypted keystores).

A named account is a keystore in the keys folder (`$COLOCO_HOME/keys`, default
`~/.config/coloco/keys`); commands that send take it as `--account NAME`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from coloco_cli.common import account_path, emit_json, keys_dir
from coloco_cli.node.ops import checksum
from protocol.errors import ConfigError, KeystoreError
from protocol.keys import (
    PASSWORD_ENV,
    create_keystore,
    keystore_info,
    load_node_key,
    read_password,
)
from protocol.types import Address

app = typer.Typer(no_args_is_help=True)
console = Console()

PasswordFile = Annotated[
    Path | None,
    typer.Option(
        "--password-file",
        envvar="COLOCO_PASSWORD_FILE",
        help=f"File holding the password (else ${PASSWORD_ENV}, else you are asked).",
    ),
]


NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="Store it as a named account (use it with --account NAME)."),
]


def _target(name: str | None, out: Path | None) -> Path:
    if name is not None and out is not None:
        raise ConfigError("pass --name (a named account) or --out PATH, not both")
    if name is not None:
        return account_path(name)
    return out or Path("node-key.json")


def _payout(payout: str | None) -> Address | None:
    if payout is None:
        return None
    try:
        return Address(checksum(payout, what="--payout"))
    except ConfigError as exc:
        raise typer.BadParameter(
            f"{exc.message} (lowercase or a correct EIP-55 checksum)", param_hint="--payout"
        ) from None


@app.command()
def new(
    *,
    name: NameOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Keystore JSON to write (mode 0600); default node-key.json."
        ),
    ] = None,
    payout: Annotated[
        str | None,
        typer.Option(help="Cold payout address that receives the rewards."),
    ] = None,
    password_file: PasswordFile = None,
    light_kdf: Annotated[
        bool, typer.Option("--light-kdf", help="Fast, weak KDF: for tests and devnets only.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
) -> None:
    """Create a new hot signing key, encrypted with a password; prints its address.

    Example: coloco keys new --name node1 --payout 0xCOLD... --password-file pw.txt
    """
    out = _target(name, out)
    payout_address = _payout(payout)
    password = read_password(password_file=password_file, confirm=True)
    key = create_keystore(out, password, payout=payout_address, light=light_kdf, overwrite=force)
    if json_out:
        emit_json({"address": key.address, "payout": key.payout, "path": str(out), "name": name})
        return
    console.print(f"address {key.address}")
    console.print(f"payout  {key.payout or '(none: set one with --payout)'}")
    console.print(f"written {out}")


@app.command("import")
def import_(
    name: Annotated[str, typer.Argument(help="Name of the new account.")],
    *,
    private_key_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the 0x private key (else $COLOCO_PRIVATE_KEY, else asked)."
        ),
    ] = None,
    payout: Annotated[
        str | None, typer.Option(help="Cold payout address to record beside the key.")
    ] = None,
    password_file: PasswordFile = None,
    light_kdf: Annotated[
        bool, typer.Option("--light-kdf", help="Fast, weak KDF: for tests and devnets only.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Overwrite an existing account.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
) -> None:
    """Import an existing private key as a named account (encrypted with a password).

    Example: coloco keys import operator --private-key-file op.key --password-file pw.txt
    """
    import os

    from protocol.keys import ask_secret

    if private_key_file is not None:
        try:
            raw = private_key_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--private-key-file {private_key_file}: {exc}") from None
    else:
        raw = os.environ.get("COLOCO_PRIVATE_KEY") or ask_secret(
            "Private key (0x...): ", "the private key to import"
        )
    try:
        key_bytes = bytes.fromhex(raw.strip().removeprefix("0x"))
    except ValueError:
        key_bytes = b""
    if len(key_bytes) != 32:
        raise ConfigError("the private key must be 32 bytes in hex (0x + 64 hex digits)")
    path = account_path(name)
    password = read_password(password_file=password_file, confirm=True)
    key = create_keystore(
        path, password, payout=_payout(payout), private_key=key_bytes, light=light_kdf,
        overwrite=force,
    )  # fmt: skip
    if json_out:
        emit_json({"name": name, "address": key.address, "payout": key.payout, "path": str(path)})
        return
    console.print(f"imported {key.address} as account [bold]{name}[/] ({path})")


@app.command("list")
def list_(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
) -> None:
    """List the named accounts (no password needed).

    Example: coloco keys list --json
    """
    folder = keys_dir()
    accounts: list[dict[str, str | None]] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            address, payout = keystore_info(path)
        except KeystoreError as exc:
            accounts.append({"name": path.stem, "error": exc.message, "path": str(path)})
            continue
        accounts.append(
            {"name": path.stem, "address": address, "payout": payout, "path": str(path)}
        )
    if json_out:
        emit_json({"keys_dir": str(folder), "accounts": accounts})
        return
    if not accounts:
        console.print(f"no named accounts in {folder}: `coloco keys new --name NAME`")
    for acc in accounts:
        console.print(f"{acc['name']:<16} {acc.get('address') or acc.get('error')}")


@app.command()
def show(
    path: Annotated[Path, typer.Argument(help="Keystore JSON, or the name of an account.")],
    check: Annotated[
        bool, typer.Option("--check", help="Also decrypt it to prove the password is right.")
    ] = False,
    password_file: PasswordFile = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
    field: Annotated[
        str | None,
        typer.Option(help="Print only this: address or payout (for shell scripts)."),
    ] = None,
) -> None:
    """Show a keystore's address and payout address (no password needed unless --check).

    Example: NODE=$(coloco keys show node1 --field address)
    """
    if not path.exists() and path.suffix != ".json" and account_path(str(path)).is_file():
        path = account_path(str(path))
    address, payout = keystore_info(path)
    if check:
        key = load_node_key(path, read_password(password_file=password_file))
        if address is not None and key.address != address:
            raise KeystoreError(f"{path}: stated address {address} differs from the key's")
        address = key.address
    if field is not None:
        if field not in {"address", "payout"}:
            raise typer.BadParameter("choose address or payout", param_hint="--field")
        value = address if field == "address" else payout
        if value is None:
            raise KeystoreError(f"{path} records no {field}")
        typer.echo(value)
        return
    if json_out:
        emit_json({"address": address, "payout": payout, "decrypted": check})
        return
    console.print(f"address {address or '(not stored: use --check)'}")
    console.print(f"payout  {payout or '(none)'}")
    if check:
        console.print("password ok")
