"""PUT/GET /v1/blobs/{hash}: safetensors blobs addressed by the canonical hash of their tensors.

Uploads stream to disk (never held in memory) and need a registered node's signature
(:mod:`protocol.blob_auth`), except a blob a run or round already names as its checkpoint, which
anyone may bring (its content is fixed by its hash). A signed upload holds its node's upload
slots and quota while in flight, an unsigned one a budget all unsigned uploads share
(:mod:`ledger.core.blob_holds`); the body must arrive within ``BLOB_UPLOAD_DEADLINE_S``.
Downloads stream from disk.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers

from ledger.api.deps import BlobsDep, DomainDep, SnapshotDep
from ledger.api.errors import errors
from ledger.chain.indexer import ChainSnapshot
from ledger.core.blobstore import BlobStore
from ledger.core.schemas import BlobOut
from protocol import blob_auth
from protocol.eip712 import Eip712Domain, check_address
from protocol.errors import EncodingError, LedgerError, SignatureError

router = APIRouter(prefix="/blobs", tags=["blobs"])

HashPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{64}$", description="canonical hash")]

_AUTH_HELP = (
    "sign the upload with the node's hot key (protocol.blob_auth: headers "
    + ", ".join(blob_auth.HEADERS)
    + ")"
)


def authorise(
    headers: Headers,
    blob: str,
    *,
    store: BlobStore,
    snapshot: ChainSnapshot,
    domain: Eip712Domain,
) -> str | None:
    """The node that signed the upload, or None for an unsigned checkpoint a run names."""
    node_h, expires_h, sig_h = (headers.get(name) for name in blob_auth.HEADERS)
    if node_h is None and expires_h is None and sig_h is None:
        if store.wanted(blob):
            return None
        raise LedgerError(f"anonymous blob upload refused: {_AUTH_HELP}", code="unauthorized")
    if node_h is None or expires_h is None or sig_h is None:
        raise LedgerError(f"incomplete upload authorisation: {_AUTH_HELP}", code="unauthorized")
    try:
        node = check_address("blob uploader", node_h)
        expires = blob_auth.parse_expires(expires_h, now=time.time())
    except (EncodingError, SignatureError) as exc:
        raise LedgerError(f"{exc}; {_AUTH_HELP}", code="unauthorized") from None
    if node not in snapshot.nodes or not snapshot.nodes[node].registered:
        raise LedgerError(
            f"node {node} is not registered in StakeManager: register it before uploading",
            code="unregistered_node",
        )
    if not snapshot.is_active(node):
        raise LedgerError(f"node {node} has less than the minimum stake", code="not_staked")
    try:
        signer = blob_auth.recover_uploader(domain, node, blob, expires, sig_h)
    except SignatureError as exc:
        raise LedgerError(f"upload signature: {exc}", code="unauthorized") from None
    if signer != node:
        raise LedgerError(
            f"upload signed by {signer}, not by {node}: sign with the node's hot key",
            code="signer_mismatch",
        )
    return node


async def _body(request: Request, deadline_s: float) -> AsyncIterator[bytes]:
    """The request's body chunks, refused with ``upload_timeout`` once ``deadline_s`` pass."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(anext(stream), max(deadline - loop.time(), 0))
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise LedgerError(
                f"the upload's body did not arrive within {deadline_s:g} s "
                "(COLOCO_LEDGER_BLOB_UPLOAD_DEADLINE_S): nothing was stored; upload again, "
                "faster or from closer",
                code="upload_timeout",
            ) from None
        yield chunk


@router.put(
    "/{hash}",
    response_model=BlobOut,
    status_code=201,
    responses={
        201: {
            "description": "stored (or already there)",
            "links": {
                "GetBlob": {
                    "operationRef": "#/paths/~1v1~1blobs~1{hash}/get",
                    "parameters": {"hash": "$response.body#/hash"},
                }
            },
        },
        **errors(401, 403, 408, 413, 422, 429, 503, 507),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def put_blob(
    hash: HashPath,
    request: Request,
    store: BlobsDep,
    snapshot: SnapshotDep,
    domain: DomainDep,
) -> BlobOut:
    """Upload a checkpoint or pseudo-gradient (safetensors); it must hash to ``hash``."""
    blob = hash.lower()
    if store.exists(blob):
        return BlobOut(hash=blob, size=store.path(blob).stat().st_size)
    uploader = await run_in_threadpool(
        authorise, request.headers, blob, store=store, snapshot=snapshot, domain=domain
    )
    length = request.headers.get("content-length")
    declared = int(length) if length is not None and length.isdigit() else None
    pays = uploader is not None and not await run_in_threadpool(store.wanted, blob)
    upload = await run_in_threadpool(
        store.receive, blob, sender=uploader, pays=pays, declared=declared
    )
    try:
        async for chunk in _body(request, store.upload_deadline_s):
            if chunk:
                await run_in_threadpool(upload.write, chunk)
    except BaseException:
        upload.abort()
        raise
    if upload.size == 0:
        upload.abort()
        raise LedgerError("empty body: send the safetensors bytes", code="bad_blob")
    size = await run_in_threadpool(upload.finish)
    return BlobOut(hash=blob, size=size)


@router.get(
    "/{hash}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}, **errors(403, 404, 422, 503)},
)
def get_blob(hash: HashPath, store: BlobsDep) -> Response:
    """A blob; a pseudo-gradient of a round still open or closing is not readable (no copying)."""
    if store.hidden(hash):
        raise LedgerError(
            f"blob {hash} is a pseudo-gradient of a round not scored yet: readable once it closes",
            code="not_yet_public",
        )
    path = store.path(hash)
    if not path.is_file():
        raise LedgerError(
            f"no blob {hash}: upload it with PUT /v1/blobs/{{hash}}", code="not_found"
        )
    return FileResponse(path, media_type="application/octet-stream")
