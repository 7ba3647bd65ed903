"""The demo's people: node operators, each with a hot node key, a cold payout key and a stake.

Operators are anvil's funded accounts 2.. (0 deploys, 1 is the ledger's committer). Each node's
hot key is written by `coloco keys new` as an encrypted keystore (what `coloco node run` loads);
each payout key is a fresh account, funded for gas so it can claim and vote on its own. Register
and stake are the operator's `coloco node register | stake | status`.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coloco_cli.demo.shell import Secret, Shell
from protocol.errors import ChainError, ConfigError

if TYPE_CHECKING:
    from coloco_cli.demo.net import DemoNet

log = logging.getLogger(__name__)

FIRST_OPERATOR_ACCOUNT = 2


@dataclass(frozen=True)
class Actor:
    """One node operator with its node and its payout address."""

    name: str
    operator_address: str
    operator_key: str
    node_address: str
    keystore: Path
    password_file: Path
    payout_address: str
    payout_key: str


def write_keystore(shell: Shell, folder: Path, name: str, payout: str) -> tuple[str, Path, Path]:
    """A fresh hot key as a keystore (`coloco keys new`); returns (address, keystore, password)."""
    folder.mkdir(parents=True, exist_ok=True)
    ks_path = folder / f"{name}.json"
    pw_path = folder / f"{name}.password"
    pw_path.write_text(secrets.token_hex(16))
    pw_path.chmod(0o600)
    # light KDF: a throwaway devnet key, and the demo must stay fast
    made = shell.json(
        "keys", "new", "--out", ks_path, "--payout", payout, "--password-file", pw_path,
        "--light-kdf", "--force",
    )  # fmt: skip
    return str(made["address"]), ks_path, pw_path


def make_actors(net: DemoNet, shell: Shell, count: int) -> list[Actor]:
    """`count` operators, each with a new node key and a new, funded payout key."""
    from eth_account import Account

    if FIRST_OPERATOR_ACCOUNT + count > len(net.anvil.accounts):
        raise ConfigError(
            f"the demo supports at most {len(net.anvil.accounts) - FIRST_OPERATOR_ACCOUNT} nodes "
            "(one funded anvil account per operator): lower --nodes"
        )
    actors = []
    for i in range(count):
        op_address, op_key = net.anvil.accounts[FIRST_OPERATOR_ACCOUNT + i]
        name = f"node-{i + 1}"
        payout = Account.create()
        node_address, ks, pw = write_keystore(
            shell, net.workdir / "keys", name, str(payout.address)
        )
        net.fund(payout.address)
        actors.append(
            Actor(
                name=name,
                operator_address=op_address,
                operator_key=op_key,
                node_address=node_address,
                keystore=ks,
                password_file=pw,
                payout_address=str(payout.address),
                payout_key="0x" + bytes(payout.key).hex(),
            )
        )
    return actors


def operator_key(actor: Actor) -> Secret:
    return Secret(actor.operator_key, f"OPERATOR_KEY_{actor.name[5:]}")


def payout_key(actor: Actor) -> Secret:
    return Secret(actor.payout_key, f"PAYOUT_KEY_{actor.name[5:]}")


def register_and_stake(shell: Shell, actor: Actor) -> None:
    """The operator registers its node with its payout address and stakes the minimum."""
    shell.run(
        "node", "register", "--node-keystore", actor.keystore,
        "--node-password-file", actor.password_file, "--payout", actor.payout_address,
        "--private-key", operator_key(actor),
    )  # fmt: skip
    shell.run("node", "stake", "--node", actor.node_address, "--private-key", operator_key(actor))
    status = shell.json("node", "status", "--node", actor.node_address)
    if not status.get("active"):
        raise ChainError(f"{actor.name} staked but its node is not active: {status}")
    log.debug("%s: node %s registered and staked", actor.name, actor.node_address)
