"""The node's client for the ledger's HTTP API (docs/interfaces.md, under /v1).

Retries with exponential backoff on connection errors, timeouts, 429 and 5xx; a 4xx answer is the
ledger's verdict and is raised at once as :class:`AttestationRejected` / :class:`LedgerError`
carrying the ledger's error code. Every call is idempotent (re-posting the same signed attestation
answers the same id; blobs are content-addressed), so retrying is always safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from protocol.attestation import ComputeAttestation
from protocol.blob_auth import UploadSigner
from protocol.errors import AttestationRejected, LedgerError, LedgerUnavailableError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0

    def delay(self, attempt: int) -> float:
        return float(min(self.base_delay_s * 2**attempt, self.max_delay_s))


def _hex(h: bytes) -> str:
    if len(h) != 32:
        raise LedgerError(f"blob hash must be 32 bytes, got {len(h)}")
    return "0x" + h.hex()


class LedgerClient:
    """Thin, typed access to one ledger service."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        http: httpx.Client | None = None,
        uploader: UploadSigner | None = None,
    ) -> None:
        """``http``: an existing client to use (e.g. FastAPI's TestClient around a real app);
        ``uploader``: signs blob uploads with a node's hot key (the ledger refuses anonymous
        uploads of blobs no run names yet)."""
        self.base_url = base_url.rstrip("/")
        self.uploader = uploader
        self.retry = retry or RetryPolicy()
        self.http = http or httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, what: str, **kw: Any) -> httpx.Response:
        last: str = ""
        for attempt in range(self.retry.attempts):
            try:
                resp = self.http.request(method, path, **kw)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code < 400:
                    return resp
                if resp.status_code != 429 and resp.status_code < 500:
                    raise _refusal(resp, what)
                last = f"HTTP {resp.status_code}"
            if attempt + 1 < self.retry.attempts:
                delay = self.retry.delay(attempt)
                log.warning("%s: %s; retrying in %.2fs", what, last, delay)
                time.sleep(delay)
        raise LedgerUnavailableError(
            f"{what}: the ledger at {self.base_url} did not answer after "
            f"{self.retry.attempts} attempts ({last}). Is it running? Check --ledger-url."
        )

    def health(self) -> dict[str, Any]:
        return dict(self._request("GET", "/v1/health", "ledger health").json())

    def put_blob(self, blob_hash: bytes, data: bytes) -> None:
        """Upload a safetensors blob whose canonical tensor hash is ``blob_hash``."""
        headers = {"content-type": "application/octet-stream"}
        if self.uploader is not None:
            headers.update(self.uploader.headers(_hex(blob_hash)))
        self._request(
            "PUT",
            f"/v1/blobs/{_hex(blob_hash)}",
            f"upload of blob {_hex(blob_hash)[:18]}..",
            content=data,
            headers=headers,
        )

    def get_blob(self, blob_hash: bytes) -> bytes | None:
        """A blob's bytes, or None when the ledger does not hold it."""
        try:
            return self._request(
                "GET", f"/v1/blobs/{_hex(blob_hash)}", f"download of blob {_hex(blob_hash)[:18]}.."
            ).content
        except LedgerError as exc:
            if exc.code == "not_found":
                return None
            raise

    def outer(self, run_id: bytes, round: int) -> dict[str, Any] | None:
        """The weights (``checkpoint``) and outer momentum (``momentum``) blob hashes the ledger
        committed for ``round``, or None when it has not judged that round yet."""
        try:
            resp = self._request(
                "GET", f"/v1/runs/{_hex(run_id)}/outer/{round}", f"round {round}'s outer state"
            )
        except LedgerError as exc:
            if exc.code == "not_found":
                return None
            raise
        return dict(resp.json())

    def boundary_requests(self, node: str) -> list[dict[str, Any]]:
        """The boundaries of its rounds' traces the ledger asked ``node`` for, still pending."""
        resp = self._request("GET", "/v1/boundaries/requests", "boundary requests",
                             params={"node": node})  # fmt: skip
        return [dict(r) for r in resp.json()]

    def deliver_boundary(self, delivery: dict[str, Any]) -> dict[str, Any]:
        """POST a requested boundary's commitment and proof (its state uploaded first)."""
        what = f"boundary {delivery['boundary']} of round {delivery['round']}"
        resp = self._request("POST", "/v1/boundaries/deliveries", what, json=delivery)
        return dict(resp.json())

    def join_round(self, join: Any, signature: bytes) -> dict[str, Any]:
        """POST a signed RoundJoin: membership of a round, before it starts."""
        body = {"join": join.to_json(), "signature": "0x" + signature.hex()}
        resp = self._request(
            "POST", "/v1/joins", f"attestation join of round {join.round}", json=body
        )
        return dict(resp.json())

    def submit_attestation(
        self,
        attestation: ComputeAttestation,
        signature: bytes,
        round_members: Sequence[str],
        input_commits: Sequence[str] = (),
    ) -> int:
        """POST a signed attestation, with the members' signed packet commitments the node
        checked (evidence); returns the ledger's id (the same id on a re-post)."""
        body: dict[str, Any] = {
            "attestation": attestation.to_json(),
            "signature": "0x" + signature.hex(),
            "round_members": list(round_members),
        }
        if input_commits:
            body["input_commits"] = list(input_commits)
        resp = self._request(
            "POST",
            "/v1/attestations",
            f"attestation for round {attestation.round}",
            json=body,
        )
        return int(resp.json()["id"])


def _refusal(resp: httpx.Response, what: str) -> LedgerError:
    try:
        err = resp.json()["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        code, message = f"http_{resp.status_code}", resp.text[:300]
    cls: Callable[..., LedgerError] = AttestationRejected if "attestation" in what else LedgerError
    return cls(
        f"{what} refused by the ledger (HTTP {resp.status_code}, {code}): {message}", code=code
    )
