"""POST /v1/attestations and /v1/attestations/batch."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from ledger.api.deps import JSON_BODY, IntakeDep, MetricsDep, SettingsDep
from ledger.api.errors import error_response, errors, json_response
from ledger.core.schemas import (
    Accepted,
    AttestationIn,
    BatchIn,
    BatchItemResult,
    BatchOut,
)
from ledger.intake.accept import Intake
from ledger.intake.jobs import Outcome
from ledger.reads.metrics import Metrics

router = APIRouter(prefix="/attestations", tags=["attestations"])

# one attestation's refusals (docs/ledger.md, "Error codes"); a batch answers them per item
_ERRORS = errors(400, 403, 404, 409, 413, 415, 422, 503)


def _error(outcome: Outcome) -> Response:
    return error_response(outcome.status, outcome.code or "rejected", outcome.message or "")


async def accept_one(intake: Intake, metrics: Metrics, body: AttestationIn) -> Response:
    """Verify and store one attestation: 202 with its id, or the refusal."""
    outcomes = await intake.submit_async([body])
    metrics.count(outcomes)
    outcome = outcomes[0]
    if outcome.status != 202:
        return _error(outcome)
    return json_response({"id": outcome.id, "status": "accepted"}, 202)


async def accept_batch(intake: Intake, metrics: Metrics, body: BatchIn, *, limit: int) -> Response:
    """Verify and store a batch of at most ``limit`` items: 202 with one result per item, in
    order."""
    if len(body.items) > limit:
        return _error(
            Outcome(413, code="batch_too_large", message=f"at most {limit} items per batch")
        )
    results = []
    accepted = 0
    outcomes = await intake.submit_async(body.items)
    metrics.count(outcomes)
    for index, outcome in enumerate(outcomes):
        if outcome.status == 202:
            accepted += 1
            results.append(
                {"index": index, "status": "accepted", "id": outcome.id, "http_status": 202}
            )
        else:
            results.append(
                {
                    "index": index,
                    "status": "rejected",
                    "http_status": outcome.status,
                    "error": {"code": outcome.code, "message": outcome.message},
                }
            )
    return json_response(
        {"accepted": accepted, "rejected": len(results) - accepted, "results": results}, 202
    )


# JSON bodies reach these two handlers through ledger.api.fast_path (no FastAPI machinery);
# these routes document them (OpenAPI) and serve the other content types
@router.post(
    "", status_code=202, response_model=Accepted, responses=_ERRORS, dependencies=JSON_BODY
)
async def post_attestation(body: AttestationIn, intake: IntakeDep, metrics: MetricsDep) -> Response:
    """Submit one signed ComputeAttestation. Re-posting the same one answers the same id."""
    return await accept_one(intake, metrics, body)


@router.post(
    "/batch", status_code=202, response_model=BatchOut, responses=_ERRORS, dependencies=JSON_BODY
)
async def post_batch(
    body: BatchIn, intake: IntakeDep, metrics: MetricsDep, settings: SettingsDep
) -> Response:
    """Submit many attestations in one request; one result per item, in order."""
    return await accept_batch(intake, metrics, body, limit=settings.max_batch_items)


__all__ = ["BatchItemResult", "router"]
