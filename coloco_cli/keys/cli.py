"""`coloco keys`: create and inspect node keys (encrypted eth-account keystores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from protocol.eip712 import check_address
from protocol.errors import EncodingError, KeystoreError
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


@app.command()
def new(
    *,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the keystore JSON (mode 0600).")
    ] = Path("node-key.json"),
    payout: Annotated[
        str | None,
        typer.Option(help="Cold payout address (checksummed) that receives the rewards."),
    ] = None,
    password_file: PasswordFile = None,
    light_kdf: Annotated[
        bool, typer.Option("--light-kdf", help="Fast, weak KDF: for tests and devnets only.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
) -> None:
    """Create a new hot signing key, encrypted with a password; prints its address.

    Example: coloco keys new --out node.json --payout 0xCOLD... --password-file pw.txt
    """
    payout_address: Address | None = None
    if payout is not None:
        try:
            payout_address = check_address("--payout", payout)
        except EncodingError as exc:
            raise typer.BadParameter(exc.message, param_hint="--payout") from None
    password = read_password(password_file=password_file, confirm=True)
    key = create_keystore(out, password, payout=payout_address, light=light_kdf, overwrite=force)
    if json_out:
        console.print_json(
            json.dumps({"address": key.address, "payout": key.payout, "path": str(out)})
        )
        return
    console.print(f"address {key.address}")
    console.print(f"payout  {key.payout or '(none: set one with --payout)'}")
    console.print(f"written {out}")


@app.command()
def show(
    path: Annotated[Path, typer.Argument(help="Keystore JSON.")],
    check: Annotated[
        bool, typer.Option("--check", help="Also decrypt it to prove the password is right.")
    ] = False,
    password_file: PasswordFile = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
) -> None:
    """Show a keystore's address and payout address (no password needed unless --check)."""
    address, payout = keystore_info(path)
    if check:
        key = load_node_key(path, read_password(password_file=password_file))
        if address is not None and key.address != address:
            raise KeystoreError(f"{path}: stated address {address} differs from the key's")
        address = key.address
    if json_out:
        console.print_json(json.dumps({"address": address, "payout": payout, "decrypted": check}))
        return
    console.print(f"address {address or '(not stored: use --check)'}")
    console.print(f"payout  {payout or '(none)'}")
    if check:
        console.print("password ok")
