"""`coloco market offer | offers | request | lease | challenge`: the compute market (docs/cli.md).

A node signs an offer of its measured hardware at a price (`offer`); anyone lists the offers
(`offers`); an organiser states a run's needs and reads the ledger's ranked choice, with the
reason every other offer was not chosen (`request`), and leases a node for a run's rounds, paid
in the round's root (`lease`, coloco_cli.market.lease); a node proves its hardware with the timed
challenge whose measured figures an offer carries (`challenge`, coloco_cli.market.challenge).
Every command takes `--json`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from coloco_cli.common import parse_amount
from coloco_cli.market import lease, ops
from coloco_cli.market.challenge import challenge
from coloco_cli.tx import TxOptions, reads, report, signs
from protocol.display import binary_bytes, eth, si, utc

app = typer.Typer(no_args_is_help=True)
app.add_typer(
    lease.app,
    name="lease",
    help="Lease a node for a run's rounds: open, status, claim, refund (paid in the round's root).",
)
app.command("challenge")(challenge)

ZERO32 = "0x" + "00" * 32


@app.command()
@signs
def offer(
    *,
    device_kind: Annotated[str, typer.Option(help="Device label, e.g. nvidia-h200 or cpu.")],
    devices: Annotated[int, typer.Option(min=1, help="Devices offered.")],
    memory: Annotated[str, typer.Option(help="Memory per device, e.g. 80GiB.")],
    flops: Annotated[str, typer.Option(help="Measured FLOP/s per device, e.g. 50T.")],
    bandwidth: Annotated[str, typer.Option(help="Measured bit/s to the ledger, e.g. 1G.")],
    price: Annotated[str, typer.Option(help="ETH per device-hour, e.g. 0.002 or 100gwei.")],
    region: Annotated[str, typer.Option(help="Region label, e.g. eu-west.")] = "unknown",
    min_hours: Annotated[int, typer.Option(min=0, help="Shortest lease, in hours.")] = 1,
    expires_in: Annotated[
        int, typer.Option(min=60, help="Seconds until the offer expires (at most 30 days).")
    ] = 86400,
    nonce: Annotated[
        int | None, typer.Option(min=0, help="Default: one above the node's current offer's.")
    ] = None,
    challenge: Annotated[
        str, typer.Option(help="The hardware challenge result (0x + 64 hex) the figures come from.")
    ] = ZERO32,
    opts: TxOptions,
) -> None:
    """Sign and post the node's offer of its measured hardware at a price.

    The signer is the node's hot key; a newer offer replaces the node's current one.

    Example: coloco market offer --device-kind nvidia-h200 --devices 8 --memory 141GiB
    --flops 60T --bandwidth 10G --price 0.002 --region eu-west --private-key 0xNODEKEY
    """
    try:
        challenge_bytes = bytes.fromhex(challenge.removeprefix("0x"))
    except ValueError:
        challenge_bytes = b""
    if len(challenge_bytes) != 32:
        raise typer.BadParameter("--challenge: 0x + 64 hex digits (a challenge result's id)")
    fields: dict[str, Any] = {
        "device_kind": ops.label(device_kind, "--device-kind"),
        "device_count": devices,
        "memory_bytes": ops.parse_quantity(memory, what="--memory", unit="B"),
        "flops": ops.parse_quantity(flops, what="--flops", unit="FLOP/s"),
        "bandwidth": ops.parse_quantity(bandwidth, what="--bandwidth", unit="bit/s"),
        "region": ops.label(region, "--region"),
        "price_per_device_hour": parse_amount(price, what="--price"),
        "min_hours": min_hours,
        "expiry": ops.expiry_in(expires_in),
        "nonce": nonce,
        "challenge": challenge_bytes,
    }
    out = ops.post_offer(opts.endpoints().ledger_url, opts.signer(), fields)
    report(opts, out, _offer_text)


def _offer_text(out: dict[str, Any]) -> str:
    o = out["offer"]
    verified = "verified" if out["verified"] else "unverified (no matched hardware challenge)"
    return (
        f"offer {out['id']} from {o['node']}: {o['deviceCount']} x "
        f"{binary_bytes(o['memoryBytes'])}, {si(o['flops'], 'FLOP/s')} each, at "
        f"{eth(o['pricePerDeviceHour'])} per device-hour until {utc(int(o['expiry']))}; "
        f"{verified}{'; replaced the previous offer' if out['replaced'] else ''}"
    )


@app.command("offers")
@reads
def offers_(
    *,
    device_kind: Annotated[str | None, typer.Option(help="Only this device label.")] = None,
    region: Annotated[str | None, typer.Option(help="Only this region.")] = None,
    min_memory: Annotated[str | None, typer.Option(help="Memory per device, e.g. 40GiB.")] = None,
    node: Annotated[str | None, typer.Option(help="Only this node (0x...).")] = None,
    operator: Annotated[str | None, typer.Option(help="Only this provider (0x...).")] = None,
    include_expired: Annotated[
        bool, typer.Option(help="Also expired offers and unstaked nodes'.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Offers per page.")] = 100,
    before: Annotated[int | None, typer.Option(help="Page: offers below this id.")] = None,
    opts: TxOptions,
) -> None:
    """List the nodes' current offers, newest first.

    Example: coloco market offers --device-kind nvidia-h200 --min-memory 40GiB
    """
    params = {
        "device_kind": device_kind,
        "region": region,
        "node": node,
        "operator": operator,
        "min_memory": ops.parse_quantity(min_memory, what="--min-memory", unit="B")
        if min_memory
        else None,
        "include_expired": "true" if include_expired else None,
        "limit": limit,
        "before": before,
    }
    report(opts, ops.list_offers(opts.endpoints().ledger_url, params), _offers_text)


def _offers_text(out: dict[str, Any]) -> str:
    if not out["offers"]:
        return "no offers"
    lines = [
        f"{'id':>5}  {'node':42}  {'devices':>18}  {'FLOP/s each':>12}  {'bandwidth':>12}  "
        f"{'ETH/device-h':>13}  {'region':10}  verified  expires"
    ]
    for o in out["offers"]:
        lines.append(
            f"{o['id']:>5}  {o['node']:42}  "
            f"{str(o['device_count']) + ' x ' + o['device_kind']:>18}  "
            f"{si(o['flops'], 'FLOP/s'):>12}  {si(o['bandwidth'], 'bit/s'):>12}  "
            f"{eth(o['price_per_device_hour']):>13}  {o['region']:10}  "
            f"{'yes' if o['verified'] else 'no':8}  {utc(int(o['expiry']))}"
        )
    if out["next_before"] is not None:
        lines.append(f"more: --before {out['next_before']}")
    return "\n".join(lines)


@app.command()
@reads
def request(
    *,
    devices: Annotated[int, typer.Option(min=1, help="Devices the run needs in all.")],
    memory: Annotated[str, typer.Option(help="Memory each device needs, e.g. 40GiB.")],
    hours: Annotated[int, typer.Option(min=1, help="Hours of the lease.")],
    budget: Annotated[str, typer.Option(help="ETH for all devices and hours, e.g. 1.5.")],
    min_bandwidth: Annotated[
        str | None, typer.Option(help="bit/s each node needs, e.g. 100M (or derive it below).")
    ] = None,
    packet_bytes: Annotated[
        str | None, typer.Option(help="The run's packet per round, e.g. 100MB.")
    ] = None,
    round_seconds: Annotated[int | None, typer.Option(min=1, help="The run's round time.")] = None,
    verified_only: Annotated[bool, typer.Option(help="Take verified offers only.")] = False,
    max_providers: Annotated[
        int | None, typer.Option(min=1, help="At most this many providers (operators).")
    ] = None,
    opts: TxOptions,
) -> None:
    """Rank the offers for a run's needs, with the reason for each offer not chosen.

    Nothing is reserved (a lease does that).

    Example: coloco market request --devices 8 --memory 40GiB --hours 4 --budget 1
    --packet-bytes 100MB --round-seconds 600
    """
    if min_bandwidth is None and (packet_bytes is None or round_seconds is None):
        raise typer.BadParameter(
            "state the bandwidth need: --min-bandwidth 100M, or --packet-bytes and "
            "--round-seconds (the ledger derives it)"
        )
    body: dict[str, Any] = {
        "devices": devices,
        "memory_bytes": ops.parse_quantity(memory, what="--memory", unit="B"),
        "hours": hours,
        "budget": str(parse_amount(budget, what="--budget")),
        "verified_only": verified_only,
    }
    if min_bandwidth is not None:
        bit_per_s = ops.parse_quantity(min_bandwidth, what="--min-bandwidth", unit="bit/s")
        body["bandwidth"] = {"bit_per_s": bit_per_s}
    else:
        assert packet_bytes is not None
        size = ops.parse_quantity(packet_bytes, what="--packet-bytes", unit="B")
        body["bandwidth"] = {"packet_bytes": size, "round_seconds": round_seconds}
    if max_providers is not None:
        body["max_providers"] = max_providers
    out = ops.ledger_post(opts.endpoints().ledger_url, "/v1/market/requests", body)
    report(opts, out, _request_text)


def _request_text(out: dict[str, Any]) -> str:
    req = out["request"]
    head = (
        f"{'filled' if out['filled'] else 'NOT filled'}: {out['devices']} of {req['devices']} "
        f"devices for {req['hours']} h, {eth(out['cost_wei'])} of {eth(req['budget'])} "
        f"(each node needs {si(req['min_bandwidth'], 'bit/s')})"
    )
    lines = [head]
    if out["shortfall"]:
        lines.append(f"  {out['shortfall']}")
    for c in out["chosen"]:
        per = c["cost_per_pflops_hour"]
        lines.append(
            f"  #{c['rank']} offer {c['id']} {c['node']} ({c['devices']} x {c['device_kind']}, "
            f"{'verified' if c['verified'] else 'unverified'}): {eth(c['cost_wei'])}, "
            f"{eth(per)} per PFLOP/s-hour"
        )
    for n in out["not_chosen"]:
        lines.append(f"  - offer {n['id']} {n['node']}: {n['code']}: {n['reason']}")
    return "\n".join(lines)
