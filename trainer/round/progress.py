"""Live progress of a node for the terminal (rich) and one JSON log line per round."""

from __future__ import annotations

import json
import logging
import threading
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table

from reference.inner import StepInfo
from trainer.round.schedule import RoundReport

log = logging.getLogger("trainer.round.progress")


class LedgerEarnings:
    """What the ledger says this node earned in this run: its verified rounds and their rewards
    (GET /v1/nodes/{address}), fetched on a thread of its own after each round so that a slow
    or absent ledger never holds the training up."""

    def __init__(self, ledger_url: str, address: str, run_id: bytes) -> None:
        self.url = f"{ledger_url.rstrip('/')}/v1/nodes/{address}"
        self.run_hex = "0x" + run_id.hex()
        self.verified: int | None = None
        self.reward: int | None = None
        self._busy = threading.Lock()

    def refresh(self) -> None:
        if self._busy.acquire(blocking=False):
            threading.Thread(target=self._fetch, name="earnings", daemon=True).start()

    def _fetch(self) -> None:
        import httpx

        try:
            rows = httpx.get(self.url, params={"limit": 500}, timeout=5.0).json()["rounds"]
            mine = [r for r in rows if str(r.get("run_id", "")).lower() == self.run_hex]
            self.verified = sum(1 for r in mine if r.get("verified"))
            self.reward = sum(int(r["reward"]) for r in mine if r.get("reward") is not None)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.debug("earnings not refreshed: %s", exc)
        finally:
            self._busy.release()


class NodeProgress:
    """A one-table live view: round, inner step of H, the phase's ETA, loss, tokens/s, peers,
    rounds attested (accepted by the ledger), earnings (the ledger's verified rounds and their
    rewards in this run), bytes sent, eval loss."""

    COLUMNS = ("round", "step/H", "ETA", "loss", "tokens/s", "peers", "attested", "earned",
               "bytes sent", "eval loss")  # fmt: skip

    def __init__(
        self,
        address: str,
        console: Console | None = None,
        earnings: LedgerEarnings | None = None,
    ) -> None:
        self.address = address
        self.console = console or Console(stderr=True)
        self.earnings = earnings
        self.round = 0
        self.step = 0
        self.of = 0
        self.eta_s: float | None = None
        self.loss = float("nan")
        self.tokens_per_s = 0.0
        self.bytes_sent = 0
        self.eval_loss: float | None = None
        self.peers: int | None = None
        self.rounds = 0
        self.attested = 0
        # re-rendered at each refresh: the earnings arrive between steps, from another thread
        self.live = Live(
            console=self.console,
            get_renderable=self._table,
            refresh_per_second=4,
            transient=False,
        )

    def _table(self) -> Table:
        t = Table(title=f"coloco node {self.address}", show_lines=False)
        for col in self.COLUMNS:
            t.add_column(col, justify="right")
        t.add_row(*self.cells())
        return t

    def cells(self) -> list[str]:
        """The table's one row, as text (column by column)."""
        earned = "-"
        if self.earnings is not None and self.earnings.reward is not None:
            earned = f"{self.earnings.reward / 10**18:,.4g} CMS ({self.earnings.verified} rounds)"
        return [
            str(self.round),
            f"{self.step}/{self.of}" if self.of else str(self.step),
            "-" if self.eta_s is None else f"{self.eta_s:,.0f}s",
            f"{self.loss:.4f}",
            f"{self.tokens_per_s:,.0f}",
            "-" if self.peers is None else str(self.peers),
            f"{self.attested}/{self.rounds}",
            earned,
            f"{self.bytes_sent:,}",
            "-" if self.eval_loss is None else f"{self.eval_loss:.4f}",
        ]

    def on_step(self, round: int, info: StepInfo) -> None:
        self.round = round
        self.step, self.of = info.step, info.of
        if info.of and info.step:
            self.eta_s = info.elapsed_s / info.step * (info.of - info.step)
        self.loss = info.loss
        self.tokens_per_s = info.tokens_per_s
        self.live.update(self._table())

    def on_round(self, report: RoundReport) -> None:
        self.bytes_sent += report.bytes_sent
        self.eval_loss = report.eval_loss
        self.peers = sum(1 for m in report.members if m.lower() != self.address.lower())
        self.rounds += 1
        if report.attested is not None:  # the sender may still be on its way with this one
            self.attested = report.attested
        else:
            self.attested += report.signed.ledger_id is not None
        if self.earnings is not None:
            self.earnings.refresh()
        self.live.update(self._table())
        log_round(report)

    def __enter__(self) -> NodeProgress:
        self.live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.live.__exit__(exc_type, exc, tb)


def log_round(report: RoundReport) -> None:
    """The round's one log line: its record as one JSON object (never a Python repr), which
    `coloco node run --events` and the demo read back."""
    log.info(json.dumps(round_record(report)))


def round_record(report: RoundReport) -> dict[str, object]:
    """The structured log record of one round (also what the demo collects)."""
    return {
        "event": "round_done",
        "round": report.round,
        "rank": report.rank,
        "members": list(report.members),
        "attempts": report.attempts,
        "config_version": report.config.version,
        "inner_steps": report.steps,
        "tokens": report.tokens,
        "train_loss": round(report.final_loss, 5),
        "eval_loss": None if report.eval_loss is None else round(report.eval_loss, 5),
        "bytes_sent": report.bytes_sent,
        "base_checkpoint": "0x" + report.base_hash.hex(),
        "result_checkpoint": "0x" + report.result_hash.hex(),
        "pseudo_gradient": "0x" + bytes(report.signed.attestation.pseudo_gradient).hex(),
        "data_shard": "0x" + report.shard_id.hex(),
        "ledger_id": report.signed.ledger_id,
    }
