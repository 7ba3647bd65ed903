"""Node keys: a hot signing key in an encrypted eth-account keystore, and a cold payout address.

The keystore is a standard Web3 Secret Storage (v3) JSON file, readable by any wallet, with one
extra top-level object ``"coloco": {"payout": "0x..."}`` that wallets ignore. The private key
never appears in a repr, a log line or an exception message.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from eth_account import Account
from eth_account.signers.local import LocalAccount

from protocol.attestation import ComputeAttestation
from protocol.eip712 import Eip712Domain, check_address, to_checksum_address
from protocol.errors import KeystoreError
from protocol.signing import address_of_private_key, sign_attestation, sign_digest
from protocol.types import Address

log = logging.getLogger(__name__)

Kdf = Literal["scrypt", "pbkdf2"]
# Production-strength defaults (scrypt n=2**18 takes ~1-2 s) and a light setting for tests/devnets.
KDF_ITERATIONS: Final[dict[tuple[Kdf, bool], int]] = {
    ("scrypt", False): 2**18,
    ("scrypt", True): 2**10,
    ("pbkdf2", False): 1_000_000,
    ("pbkdf2", True): 1_000,
}
PASSWORD_ENV: Final = "COLOCO_PASSWORD"


@dataclass(frozen=True)
class NodeKey:
    """A decrypted hot key. ``repr`` shows the address only."""

    address: Address
    payout: Address | None
    _private_key: bytes = field(repr=False, compare=False)

    def __repr__(self) -> str:
        return f"NodeKey(address={self.address}, payout={self.payout}, private_key=<hidden>)"

    __str__ = __repr__

    @property
    def private_key(self) -> bytes:
        """The raw 32-byte key (for web3's signer). Do not log or persist it."""
        return self._private_key

    def sign_digest(self, digest: bytes) -> bytes:
        return sign_digest(digest, self._private_key)

    def sign_attestation(self, attestation: ComputeAttestation, domain: Eip712Domain) -> bytes:
        """Sign an attestation whose ``node`` is this key's address."""
        if attestation.node != self.address:
            raise KeystoreError(
                f"attestation.node is {attestation.node} but this key is {self.address}; "
                f"a node signs only its own attestations"
            )
        return sign_attestation(attestation, domain, self._private_key)

    @classmethod
    def from_private_key(cls, private_key: bytes, payout: Address | None = None) -> NodeKey:
        if not isinstance(private_key, bytes) or len(private_key) != 32:
            raise KeystoreError("private key: expected 32 raw bytes")
        if payout is not None:
            check_address("payout", payout)
        return cls(
            address=address_of_private_key(private_key), payout=payout, _private_key=private_key
        )


def read_password(
    *,
    password_file: Path | None = None,
    password_env: str | None = None,
    prompt: bool = True,
    confirm: bool = False,
) -> str:
    """The keystore password from a file, else an environment variable, else a prompt.

    A password file's trailing newline is stripped. ``password_env`` names the variable
    (default :data:`PASSWORD_ENV` when set).
    """
    if password_file is not None:
        try:
            return Path(password_file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise KeystoreError(f"password file {password_file}: cannot read it ({exc})") from None
    env_name = password_env or PASSWORD_ENV
    if env_name in os.environ:
        return os.environ[env_name]
    if password_env is not None:
        raise KeystoreError(
            f"environment variable {password_env} is not set; set it to the password"
        )
    if not prompt:
        raise KeystoreError(
            f"no keystore password: pass --password-file, set {PASSWORD_ENV}, or run interactively"
        )
    password = ask_secret("Keystore password: ", "the keystore password")
    if confirm and ask_secret("Repeat password: ", "the keystore password") != password:
        raise KeystoreError("the two passwords differ")
    return password


def _has_terminal() -> bool:
    """Whether getpass can ask: stdin is a terminal, or the process has one (/dev/tty)."""
    if os.isatty(0):
        return True
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def ask_secret(prompt: str, what: str) -> str:
    """Read a secret from the terminal without echo; KeystoreError when there is no terminal
    (stdin is a pipe, a file or closed: in a script, under nohup or systemd) or it ends."""
    if not _has_terminal():
        raise KeystoreError(
            f"{what} is needed but there is no terminal to ask it on (stdin is not a TTY): pass "
            f"--password-file PATH or set {PASSWORD_ENV} (a key: --private-key-file PATH)"
        )
    try:
        return getpass.getpass(prompt)
    except EOFError:
        raise KeystoreError(f"{what}: the terminal closed before it was typed") from None


def create_keystore(
    path: Path,
    password: str,
    *,
    payout: Address | None = None,
    private_key: bytes | None = None,
    kdf: Kdf = "scrypt",
    light: bool = False,
    overwrite: bool = False,
) -> NodeKey:
    """Write a new (or the given) key to ``path`` (mode 0600) encrypted with ``password``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise KeystoreError(
            f"{path} already exists: choose another name or path, or replace it with --force "
            "(its key is lost unless you kept a copy)"
        )
    if not password:
        raise KeystoreError("refusing an empty keystore password")
    key = private_key if private_key is not None else Account.create().key
    node_key = NodeKey.from_private_key(bytes(key), payout)
    data: dict[str, Any] = dict(
        Account.encrypt(
            node_key.private_key, password, kdf=kdf, iterations=KDF_ITERATIONS[kdf, light]
        )
    )
    if payout is not None:
        data["coloco"] = {"payout": payout}
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write a private temp file, then rename: never a half-written or world-readable keystore.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote keystore %s for %s", path, node_key.address)
    return node_key


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise KeystoreError(
            f"keystore {path} not found; create one with `coloco keys new`"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise KeystoreError(f"keystore {path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or ("crypto" not in data and "Crypto" not in data):
        raise KeystoreError(f"keystore {path}: not an encrypted keystore (no 'crypto' section)")
    return data


def keystore_info(path: Path) -> tuple[Address | None, Address | None]:
    """(address, payout) stored in the keystore, without decrypting it."""
    data = _read_json(path)
    raw = data.get("address")
    address = Address(to_checksum_address(raw)) if isinstance(raw, str) else None
    payout = data.get("coloco", {}).get("payout") if isinstance(data.get("coloco"), dict) else None
    return address, (check_address("keystore payout", payout) if payout is not None else None)


def load_node_key(path: Path, password: str) -> NodeKey:
    """Decrypt the keystore at ``path``; a wrong password raises KeystoreError."""
    data = _read_json(path)
    try:
        key = bytes(Account.decrypt(data, password))
    except ValueError as exc:
        reason = "wrong password" if "MAC" in str(exc) else "cannot decrypt"
        raise KeystoreError(f"keystore {path}: {reason}") from None
    _, payout = keystore_info(path)
    node_key = NodeKey.from_private_key(key, payout)
    stated = data.get("address")
    if (
        isinstance(stated, str)
        and stated.lower().removeprefix("0x") != node_key.address[2:].lower()
    ):
        raise KeystoreError(f"keystore {path}: its address field does not match the key inside")
    return node_key


def load_keystore_account(
    path: Path,
    *,
    password_file: Path | None = None,
    password_env: str | None = None,
    prompt: bool = True,
) -> LocalAccount:
    """An eth-account ``LocalAccount`` (web3's transaction signer) from an encrypted keystore.

    The password comes from ``password_file``, else ``password_env`` / ``COLOCO_PASSWORD``,
    else an interactive prompt (when ``prompt``).
    """
    password = read_password(password_file=password_file, password_env=password_env, prompt=prompt)
    account: LocalAccount = Account.from_key(load_node_key(path, password).private_key)
    return account
