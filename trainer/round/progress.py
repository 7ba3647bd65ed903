"""Live progress of a node for the terminal (rich) and one structured log line per round."""

from __future__ import annotations

import json
import logging
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table

from reference.inner import StepInfo
from trainer.round.schedule import RoundReport

log = logging.getLogger("trainer.round.progress")


class NodeProgress:
    """A one-table live view: round, inner step, loss, tokens/s, bytes sent, eval loss."""

    def __init__(self, address: str, console: Console | None = None) -> None:
        self.address = address
        self.console = console or Console(stderr=True)
        self.round = 0
        self.step = ""
        self.loss = float("nan")
        self.tokens_per_s = 0.0
        self.bytes_sent = 0
        self.eval_loss: float | None = None
        self.members = 0
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)

    def _table(self) -> Table:
        t = Table(title=f"coloco node {self.address}", show_lines=False)
        for col in ("round", "inner step", "loss", "tokens/s", "bytes sent", "eval loss", "nodes"):
            t.add_column(col, justify="right")
        t.add_row(
            str(self.round),
            self.step,
            f"{self.loss:.4f}",
            f"{self.tokens_per_s:,.0f}",
            f"{self.bytes_sent:,}",
            "-" if self.eval_loss is None else f"{self.eval_loss:.4f}",
            str(self.members),
        )
        return t

    def on_step(self, round: int, info: StepInfo) -> None:
        self.round = round
        self.step = str(info.step)
        self.loss = info.loss
        self.tokens_per_s = info.tokens_per_s
        self.live.update(self._table())

    def on_round(self, report: RoundReport) -> None:
        self.bytes_sent += report.bytes_sent
        self.eval_loss = report.eval_loss
        self.members = len(report.members)
        self.live.update(self._table())
        log.info(json.dumps(round_record(report)))

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
