"""PUT/GET /v1/blobs/{hash}: safetensors blobs addressed by the canonical hash of their tensors."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ledger.api.deps import LedgerDep
from ledger.schemas import BlobOut, ErrorResponse
from protocol.errors import LedgerError

router = APIRouter(prefix="/blobs", tags=["blobs"])

HashPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{64}$", description="canonical hash")]


@router.put(
    "/{hash}",
    response_model=BlobOut,
    status_code=201,
    responses={422: {"model": ErrorResponse}, 413: {"model": ErrorResponse}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def put_blob(hash: HashPath, request: Request, ledger: LedgerDep) -> BlobOut:
    """Upload a checkpoint or pseudo-gradient (safetensors); it must hash to ``hash``."""
    data = await request.body()
    if not data:
        raise LedgerError("empty body: send the safetensors bytes", code="bad_blob")
    size = await run_in_threadpool(ledger.blobs.put, hash, data)
    return BlobOut(hash=hash.lower(), size=size)


@router.get(
    "/{hash}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: {"model": ErrorResponse}},
)
def get_blob(hash: HashPath, ledger: LedgerDep) -> Response:
    data = ledger.blobs.get_bytes(hash)
    if data is None:
        raise LedgerError(
            f"no blob {hash}: upload it with PUT /v1/blobs/{{hash}}", code="not_found"
        )
    return Response(content=data, media_type="application/octet-stream")
