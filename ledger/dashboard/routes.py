"""The dashboard's routes: HTML by default, the same data as JSON with `?format=json`.

Each page takes what it reads through the API's dependencies (:mod:`ledger.api.deps`): the
database engine (pages open their own sessions), the chain door, and for the run page the
model cache below.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from web3 import Web3

from ledger.api.deps import BlobsDep, ChainDep, EngineDep, SettingsDep, SnapshotDep
from ledger.dashboard import contributors, market, views
from protocol import display
from protocol.eip712 import wallet_safe
from protocol.runs import run_id_of_name, short_id

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
RUN_ID = re.compile(r"^0x[0-9a-fA-F]{64}$")

_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _short(hex_text: str | None) -> str:
    """'0xF2b57AF23A0232336698F876321DFB7ee8aFd33c' -> '0xF2b5…d33c' (the full one in a title)."""
    if not hex_text:
        return "-"
    return hex_text if len(hex_text) <= 14 else f"{hex_text[:6]}…{hex_text[-4:]}"


def _split_long(text: str | None, limit: int = 160) -> tuple[str, str]:
    """(head, rest) of a cell's text: cut at a space before ``limit`` characters when it is
    longer (templates/_long.html shows the head and puts the rest behind a click)."""
    if not text or len(text) <= limit:
        return text or "", ""
    cut = text.rfind(" ", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return text[:cut], text[cut:]


# every amount and time on every page goes through these (protocol.display): no raw wei, no
# 18-decimal token units, no unix seconds
_env.filters.update(
    cms=display.cms, eth=display.eth, utc=display.utc, span=display.span, short=_short,
    run_label=lambda run: run.get("name") or short_id(run["run_id"]), short_id=short_id,
    split_long=_split_long,
)  # fmt: skip
_env.globals["relative"] = display.relative

router = APIRouter(include_in_schema=False)
FormatQ = Annotated[str, Query(pattern="^(html|json)$")]


async def get_models(request: Request, settings: SettingsDep, blobs: BlobsDep) -> views.ModelCache:
    """The app's one model cache (losses and samples of checkpoints), made on first use."""
    app = request.app
    cache: views.ModelCache | None = getattr(app.state, "dashboard_models", None)
    if cache is None:
        preset = settings.usefulness_model or "tiny"
        cache = views.ModelCache(preset, blobs, max_bytes=settings.max_blob_bytes)
        app.state.dashboard_models = cache
    return cache


ModelsDep = Annotated[views.ModelCache, Depends(get_models)]


def _page(template: str, fmt: str, context: dict[str, Any], root: str = "") -> Response:
    if fmt == "json":
        return JSONResponse(wallet_safe(context))
    html = _env.get_template(template).render(root=root, **context)
    return HTMLResponse(html)


@router.get("/")
def index(engine: EngineDep, format: FormatQ = "html") -> Response:
    """Runs and their latest rounds (kept live by static/live.js)."""
    return _page("index.html", format, {"runs": views.runs(engine)})


@router.get("/runs/{run_id}")
def run_page(
    run_id: str, engine: EngineDep, models: ModelsDep, format: FormatQ = "html"
) -> Response:
    """One run (by its id or its name): rounds with the CMS paid and the config version each
    trained under, the loss curve, the nodes, a sample from the latest checkpoint."""
    if not RUN_ID.match(run_id):
        if run_id.startswith("0x"):
            raise HTTPException(404, "a run id is 0x + 64 hex digits (or the run's name)")
        run_id = "0x" + run_id_of_name(run_id).hex()
    detail = views.run_detail(engine, run_id, models)
    if detail is None:
        raise HTTPException(404, f"run {run_id} is unknown to this ledger")
    context = {"run": detail, "curve_svg": curve_svg(detail["loss_curve"])}
    return _page("run.html", format, context if format == "html" else detail, root="../")


@router.get("/nodes")
def nodes_page(engine: EngineDep, chain: ChainDep, format: FormatQ = "html") -> Response:
    """Every node: stake, active, rounds worked, rewarded."""
    return _page("nodes.html", format, {"nodes": views.nodes(engine, chain)})


@router.get("/nodes/{address}")
def node_page(
    address: str, engine: EngineDep, chain: ChainDep, format: FormatQ = "html"
) -> Response:
    """One node's receipts: why it earned what it earned."""
    if not ADDRESS.match(address):
        raise HTTPException(404, "a node is a 0x + 40 hex digit address")
    return _page("node.html", format, views.node_detail(engine, chain, address), root="../")


@router.get("/contributors")
def contributors_page(engine: EngineDep, format: FormatQ = "html") -> Response:
    """Backers and code contributors, with their totals (ledger/dashboard/contributors.py)."""
    return _page("contributors.html", format, contributors.contributors(engine))


@router.get("/contributors/{address}")
def contributor_page(address: str, engine: EngineDep, format: FormatQ = "html") -> Response:
    """One backer's or developer's capital and code receipts."""
    if not ADDRESS.match(address):
        raise HTTPException(404, "a contributor is a 0x + 40 hex digit address")
    detail = contributors.contributor_detail(engine, Web3.to_checksum_address(address))
    return _page("contributor.html", format, detail, root="../")


@router.get("/proposals")
def proposals_page(chain: ChainDep, format: FormatQ = "html") -> Response:
    """Governance proposals with their actions, state and votes."""
    return _page("proposals.html", format, views.proposals(chain))


@router.get("/market")
def market_page(
    request: Request, engine: EngineDep, snapshot: SnapshotDep, format: FormatQ = "html"
) -> Response:
    """The live offers and, with the form's fields, a request's ranking with every reason."""
    fields = ("devices", "memory_gib", "bandwidth_mbit", "hours", "budget_eth", "verified_only")
    ask = {k: request.query_params[k][:40] for k in fields if k in request.query_params}
    return _page("market.html", format, market.market(engine, snapshot, ask or None))


@router.get("/how-to")
def how_to_page(chain: ChainDep, format: FormatQ = "html") -> Response:
    """How to claim and vote, with the typed data a wallet signs."""
    return _page("howto.html", format, views.how_to(chain))


def curve_svg(points: list[dict[str, Any]], width: int = 600, height: int = 220) -> str:
    """An inline SVG polyline of (round, eval_loss); empty string without two points."""
    if len(points) < 2:
        return ""
    pad = 36
    xs = [float(p["round"]) for p in points]
    ys = [float(p["eval_loss"]) for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    span_x, span_y = (x1 - x0) or 1.0, (y1 - y0) or 1.0

    def sx(x: float) -> float:
        return pad + (x - x0) / span_x * (width - 2 * pad)

    def sy(y: float) -> float:
        return height - pad - (y - y0) / span_y * (height - 2 * pad)

    pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, ys, strict=True))
    dots = "".join(
        f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3"/>' for x, y in zip(xs, ys, strict=True)
    )
    return (
        f'<svg class="curve" id="loss-curve" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="held-out loss by round"><polyline points="{pts}"/>{dots}'
        f'<text x="{pad}" y="{height - 8}">round {x0:.0f}</text>'
        f'<text x="{width - pad - 50}" y="{height - 8}">round {x1:.0f}</text>'
        f'<text x="4" y="{pad - 10}">loss {y1:.3f}</text>'
        f'<text x="4" y="{height - pad + 14}">loss {y0:.3f}</text></svg>'
    )


def install(app: FastAPI) -> None:
    """Serve the dashboard at `/` and its assets at `/static` on the ledger's app."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static")
