"""`coloco market lease open | status | claim | refund`: compute leases paid in the round's root.

An organiser escrows ETH for a node: a price per round (a ledger round of the run) times a window
of rounds (`ComputeLeases.openLease`). The ledger pays nothing per round: every round it commits
folds the lease's leaf (what the node earned so far) into the rewards root it commits anyway.
The node claims that leaf (`claim`) once the root's dispute window has passed; after the window
the organiser takes back the unearned escrow in one transaction (`refund`). Every command takes
`--json`; amounts are read in ETH (`0.01`, `100wei`) and shown in ETH.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from coloco_cli.common import parse_amount
from coloco_cli.ledger_http import ledger_get
from coloco_cli.node.ops import checksum
from coloco_cli.run.ops import parse_run_id
from coloco_cli.tx import TxOptions, reads, report, send_and_report, sends, tx_hex
from protocol.display import eth, utc
from protocol.errors import ConfigError, LedgerError

if TYPE_CHECKING:
    from protocol.chain import ChainClient

CONTRACT = "ComputeLeases"
app = typer.Typer(no_args_is_help=True)
LeaseArg = Annotated[
    str, typer.Argument(help="The lease id: 0x + 64 hex digits (`open` prints it).")
]

HINTS = {
    "InvalidLease": "a lease needs a node address, a price above 0 and 1 to 1,000,000 rounds",
    "WrongEscrow": "the escrow sent must be the price per round times the rounds",
    "UnknownLease": "no lease with this id on chain: check the id `market lease open` printed",
    "LeaseSettled": "this lease was already refunded (its node may still claim what it earned)",
    "LeaseNotEnded": (
        "the window's last round is not settled yet: refund once the ledger has committed it "
        "(`coloco market lease status LEASE` says `ended`), or, the run stopped, as its "
        "organiser with --early"
    ),
    "RunNotStopped": (
        "an early refund counts every committed round: wait until the root of the run's last "
        "committed round is final"
    ),
    "NothingToClaim": "the node was already paid everything the latest root says it earned",
    "LeaseOverpaid": "the root pays beyond the lease's cap: report it to the guardian",
    "RoundNotCommitted": "the leaf's round is not committed on chain yet: try again after it is",
    "RootPending": "the root is in its dispute window: claim once it has passed",
    "RootIsRevoked": "the guardian revoked this root: wait for the next round's root",
    "EnforcedPause": "the guardian paused leases: claims wait; refunds are never paused",
}


def lease_bytes(lease_id: str) -> bytes:
    text = lease_id.strip().lower()
    if not text.startswith("0x") or len(text) != 66:
        raise ConfigError(f"lease id {lease_id!r}: expected 0x + 64 hex digits (as `open` prints)")
    try:
        return bytes.fromhex(text[2:])
    except ValueError:
        raise ConfigError(f"lease id {lease_id!r}: not hexadecimal") from None


def on_chain(chain: ChainClient, lease_id: str) -> dict[str, Any]:
    """`ComputeLeases.leaseOf`, by field name (raises for an unknown lease)."""
    raw = chain.contract(CONTRACT).functions.leaseOf(lease_bytes(lease_id)).call()
    organiser, start, node, end, settled, price, paid, refunded, run = raw
    if int(organiser, 16) == 0:
        raise ConfigError(f"no lease {lease_id} on chain: check the id `open` printed")
    return {
        "lease_id": lease_id.lower(),
        "run_id": "0x" + bytes(run).hex(),
        "organiser": organiser,
        "node": node,
        "start_round": int(start),
        "end_round": int(end),
        "wei_per_round": str(price),
        "escrow_wei": str(int(price) * (int(end) - int(start) + 1)),
        "paid_wei": str(paid),
        "refunded_wei": str(refunded),
        "settled": bool(settled),
    }


def ledger_leaf(ledger_url: str, lease_id: str) -> dict[str, Any] | None:
    """The lease's leaf in the ledger's latest committed root (None: not in a root yet)."""
    path = f"/v1/leases/{lease_id.lower()}"
    resp = ledger_get(ledger_url, path)
    if resp.status_code == 404:
        return None
    if resp.status_code != 200:
        raise LedgerError(f"ledger answered {resp.status_code} for {path}: {resp.text[:300]}")
    leaf: dict[str, Any] | None = resp.json().get("leaf")
    return leaf


def _args(lease_id: str, leaf: dict[str, Any]) -> tuple[Any, ...]:
    return (
        lease_bytes(lease_id),
        int(leaf["cumulative_wei"]),
        int(leaf["through_round"]),
        bytes.fromhex(leaf["root"][2:]),
        [bytes.fromhex(p[2:]) for p in leaf["proof"]],
    )


def _claimable(leaf: dict[str, Any] | None, lease_id: str, what: str) -> dict[str, Any]:
    if leaf is None:
        raise ConfigError(
            f"lease {lease_id} is in no committed root yet: the ledger folds it into the next "
            f"round it settles; {what} after that round's dispute window"
        )
    if leaf["root_state"] != "finalized":
        when = utc(leaf["claimable_at"]) if leaf.get("claimable_at") else "after its window"
        raise ConfigError(
            f"the root holding lease {lease_id}'s leaf is {leaf['root_state']}: {what} from {when}"
        )
    return leaf


@app.command("open")
@sends
def open_(
    run_id: Annotated[str, typer.Argument(help="The run: its name or 0x + 64 hex digits.")],
    node: Annotated[str, typer.Argument(help="The leased node's key address (it is paid).")],
    *,
    price_per_round: Annotated[str, typer.Option(help="ETH per round the node completes.")],
    rounds: Annotated[int, typer.Option(help="The window: this many rounds from the next.")],
    opts: TxOptions,
) -> None:
    """Escrow price x rounds for a node; it is paid per completed round in the round's root.

    Example: coloco market lease open demo 0xNODE --price-per-round 0.01 --rounds 10
    """
    price = parse_amount(price_per_round, what="--price-per-round")
    who = checksum(node, what="NODE")
    run = parse_run_id(run_id)
    if rounds < 1:
        raise ConfigError(f"--rounds {rounds}: a lease needs at least one round")

    def send(chain: ChainClient) -> dict[str, Any]:
        fn = chain.contract(CONTRACT)
        receipt = chain.transact(
            CONTRACT, "openLease", run, who, price, rounds, value=price * rounds
        )
        (event,) = fn.events.LeaseOpened().process_receipt(receipt)
        args = event["args"]
        return {
            "tx": tx_hex(receipt),
            "lease_id": "0x" + bytes(args["leaseId"]).hex(),
            "node": who,
            "wei_per_round": str(price),
            "start_round": int(args["startRound"]),
            "end_round": int(args["endRound"]),
            "escrow_wei": str(args["escrow"]),
        }

    send_and_report(
        opts,
        send,
        lambda o: (
            f"lease {o['lease_id']}: {eth(o['escrow_wei'])} escrowed for {o['node']}, "
            f"{eth(o['wei_per_round'])} per round, rounds {o['start_round']}..{o['end_round']} "
            f"(tx {o['tx']})"
        ),
        hints=HINTS,
    )


@app.command()
@reads
def status(lease_id: LeaseArg, *, opts: TxOptions) -> None:
    """A lease's terms, what its node was paid and earned, and whether it can be refunded.

    Example: coloco market lease status 0xLEASE
    """
    st = on_chain(opts.chain(signed=False), lease_id)
    st["leaf"] = ledger_leaf(opts.endpoints().ledger_url, lease_id)
    report(opts, st, _status_text)


def _status_text(st: dict[str, Any]) -> str:
    leaf = st["leaf"]
    earned = "not in a root yet"
    if leaf is not None:
        earned = (
            f"{eth(leaf['cumulative_wei'])} ({leaf['rounds_completed']} rounds) through round "
            f"{leaf['through_round']}, root {leaf['root_state']}"
            + (", window ended: refundable" if leaf["ended"] and not st["settled"] else "")
        )
    return "\n".join(
        [
            f"lease {st['lease_id']} ({'settled' if st['settled'] else 'open'})",
            f"  run                 {st['run_id']}",
            f"  node                {st['node']}",
            f"  organiser           {st['organiser']}",
            f"  rounds              {st['start_round']}..{st['end_round']} at "
            f"{eth(st['wei_per_round'])} each",
            f"  escrow              {eth(st['escrow_wei'])}",
            f"  earned              {earned}",
            f"  paid / refunded     {eth(st['paid_wei'])} / {eth(st['refunded_wei'])}",
        ]
    )


@app.command()
@sends
def claim(lease_id: LeaseArg, *, opts: TxOptions) -> None:
    """Pay the leased node what the latest final root says it earned (anyone may send it).

    Example: coloco market lease claim 0xLEASE
    """
    ledger_url = opts.endpoints().ledger_url

    def send(chain: ChainClient) -> dict[str, Any]:
        st = on_chain(chain, lease_id)
        leaf = _claimable(ledger_leaf(ledger_url, lease_id), lease_id, "claim")
        owed = int(leaf["cumulative_wei"]) - int(st["paid_wei"])
        if owed <= 0:
            return {"lease_id": st["lease_id"], "node": st["node"], "paid_wei": "0"}
        receipt = chain.transact(CONTRACT, "claim", *_args(lease_id, leaf))
        return {
            "lease_id": st["lease_id"],
            "node": st["node"],
            "paid_wei": str(owed),
            "tx": tx_hex(receipt),
        }

    send_and_report(
        opts,
        send,
        lambda o: (
            f"paid {eth(o['paid_wei'])} to node {o['node']}"
            + (f" (tx {o['tx']})" if "tx" in o else ": nothing new to claim")
        ),
        hints=HINTS,
    )


@app.command()
@sends
def refund(
    lease_id: LeaseArg,
    *,
    opts: TxOptions,
    early: Annotated[
        bool,
        typer.Option(
            help="The run stopped before the window's end: settle through its last committed "
            "round (the organiser only; every committed round is paid)."
        ),
    ] = False,
) -> None:
    """Return the unearned escrow to the organiser in one transaction, after the window.

    Once the ledger has settled the window's last round; anyone may send it, and it is never
    paused. The node keeps what it earned (claimable with `claim`). A run that stopped early:
    its organiser sends `--early` once the root of the run's last committed round is final.

    Example: coloco market lease refund 0xLEASE
    """
    ledger_url = opts.endpoints().ledger_url

    def send(chain: ChainClient) -> dict[str, Any]:
        st = on_chain(chain, lease_id)
        leaf = _claimable(ledger_leaf(ledger_url, lease_id), lease_id, "refund")
        if early and not leaf["ended"]:
            last = int(
                chain.contract("ContributionLedger")
                .functions.lastRound(bytes.fromhex(st["run_id"][2:]))
                .call()
            )
            if int(leaf["through_round"]) != last:
                raise ConfigError(
                    f"run {st['run_id']} has committed round {last}; the latest final root "
                    f"counts through round {leaf['through_round']}: an early refund waits until "
                    f"round {last}'s root is final (and no later round is committed)"
                )
        elif not leaf["ended"]:
            raise ConfigError(
                f"lease {lease_id} runs through round {st['end_round']}; the latest root counts "
                f"through round {leaf['through_round']}: refund after the ledger settles round "
                f"{st['end_round']}"
            )
        earned = max(int(leaf["cumulative_wei"]), int(st["paid_wei"]))
        receipt = chain.transact(CONTRACT, "refund", *_args(lease_id, leaf))
        return {
            "lease_id": st["lease_id"],
            "organiser": st["organiser"],
            "refunded_wei": str(int(st["escrow_wei"]) - earned),
            "earned_wei": str(earned),
            "tx": tx_hex(receipt),
        }

    send_and_report(
        opts,
        send,
        lambda o: (
            f"refunded {eth(o['refunded_wei'])} to {o['organiser']}; the node earned "
            f"{eth(o['earned_wei'])} (tx {o['tx']})"
        ),
        hints=HINTS,
    )
