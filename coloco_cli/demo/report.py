"""The demo's outputs: the JSON report, the loss-curve PNG beside it, and the summary tables."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from coloco_cli.common import fmt_units

log = logging.getLogger(__name__)

REQUIRED_KEYS = (
    "rounds_committed",
    "nodes",
    "claims",
    "tokens_minted",
    "proposal_executed",
    "config_version_before",
    "config_version_after",
    "config_change_seen_by_trainers",
    "eval_loss_first",
    "eval_loss_last",
    "wall_s",
)


def write_report(report: dict[str, Any], path: Path) -> Path:
    """Write `report` as JSON at `path` and the loss curve as PNG beside it; returns the PNG."""
    missing = [k for k in REQUIRED_KEYS if k not in report]
    if missing:
        raise ValueError(f"demo report lacks {missing}")
    path.parent.mkdir(parents=True, exist_ok=True)
    png = path.with_suffix(".png")
    report["loss_curve_png"] = str(png)
    plot_loss(report.get("rounds", []), png)
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
    return png


def plot_loss(rounds: list[dict[str, Any]], png: Path) -> None:
    """Eval loss of each committed checkpoint, with the governance change marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["round"] for r in rounds if r.get("eval_loss") is not None]
    ys = [r["eval_loss"] for r in rounds if r.get("eval_loss") is not None]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(xs, ys, marker="o", label="eval loss of the committed checkpoint")
    versions = [(r["round"], r.get("config_version")) for r in rounds]
    for (_, v_prev), (rnd, v) in itertools.pairwise(versions):
        if v is not None and v_prev is not None and v != v_prev:
            ax.axvline(rnd - 0.5, color="tab:red", linestyle="--", label=f"config v{v} (vote)")
    joins = [r["round"] for r in rounds if r.get("joined")]
    for rnd in joins:
        ax.axvline(rnd - 0.5, color="tab:green", linestyle=":", label="node joined")
    leaves = [r["round"] for r in rounds if r.get("left")]
    for rnd in leaves:
        ax.axvline(rnd - 0.5, color="tab:gray", linestyle=":", label="node left")
    ax.set_xlabel("outer round (committed on chain)")
    ax.set_ylabel("eval loss (nats/byte)")
    ax.set_title("coloco demo: DiLoCo on the devnet")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def _short(amount: str) -> str:
    """'183.333333333333333332' -> '183.3333' (the JSON report keeps every digit)."""
    whole, dot, frac = amount.partition(".")
    return f"{whole}.{frac[:4]}" if dot else whole


def print_summary(report: dict[str, Any], console: Console) -> None:
    """Rounds, loss, per-node work, rewards and votes as rich tables."""
    rounds = Table(title="rounds settled on chain")
    for col in ("round", "members", "config v", "inner steps", "eval loss", "events"):
        rounds.add_column(col)
    for r in report.get("rounds", []):
        events = ", ".join(e for e in (r.get("joined"), r.get("left")) if e)
        loss = r.get("eval_loss")
        rounds.add_row(
            str(r["round"]),
            str(r.get("members", "")),
            str(r.get("config_version", "")),
            str(r.get("inner_steps", "")),
            f"{loss:.4f}" if isinstance(loss, float) else "-",
            events,
        )
    console.print(rounds)

    nodes = Table(title="nodes: work credited and rewards")
    columns = ("node", "address", "rounds worked", "expected", "credited exactly",
               "tokens verified", "owed CMS", "claimed CMS")  # fmt: skip
    for col in columns:
        nodes.add_column(col)
    for n in report["nodes"]:
        nodes.add_row(
            n["name"],
            n["node"][:10] + "…",
            str(n.get("rounds_worked")),
            str(n.get("rounds_expected")),
            "[green]yes[/]" if n.get("credited_exactly") else "[red]no[/]",
            f"{n.get('tokens_verified', 0):,}",
            _short(fmt_units(int(n.get("owed", 0)))),
            _short(fmt_units(int(n.get("balance", 0)))),
        )
    console.print(nodes)

    gov = report.get("governance") or {}
    summary = Table(title="outcome", show_header=False)
    summary.add_row("rounds committed", str(report["rounds_committed"]))
    summary.add_row("tokens minted", f"{fmt_units(int(report['tokens_minted']))} CMS")
    if gov:
        summary.add_row("proposal", f"{gov.get('description')} -> {gov.get('state')}")
        summary.add_row(
            "votes", f"for {fmt_units(int(gov['votes_for']))} / against "
            f"{fmt_units(int(gov['votes_against']))} ({len(gov.get('voters', []))} voters)"
        )  # fmt: skip
        for d in gov.get("delegations", []):
            summary.add_row("delegation", f"{d['from'][:10]}… -> {d['to'][:10]}…")
    summary.add_row(
        "config version",
        f"{report['config_version_before']} -> {report['config_version_after']}"
        f" (seen by trainers: {report['config_change_seen_by_trainers']})",
    )
    first, last = report["eval_loss_first"], report["eval_loss_last"]
    if first is not None and last is not None:
        summary.add_row("eval loss", f"{first:.4f} -> {last:.4f}")
    if lease := report.get("lease"):
        summary.add_row(
            "lease",
            f"{lease['node'][:10]}… paid {int(lease['paid_wei']) / 1e18:g} ETH for "
            f"{lease['rounds_completed']} rounds; refunded {int(lease['refunded_wei']) / 1e18:g}"
            " ETH (the run stopped early)",
        )
    summary.add_row("wall time", f"{report['wall_s']:.1f} s")
    for name, ok in report.get("checks", {}).items():
        summary.add_row("[green]✓[/]" if ok else "[red]✗[/]", name)
    console.print(summary)
