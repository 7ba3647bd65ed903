"""The ledger's dashboard in a real browser: Playwright drives Debian's chromium.

The session's shortened `coloco demo` leaves its chain, SQLite ledger and blob store behind; a
`coloco ledger serve` restarted on them serves the dashboard. Every page is opened in chromium
(no request may leave 127.0.0.1: no CDN), checked for what it must show, and screenshotted to
reports/dashboard/ (kept as test artefacts). Playwright never downloads a browser here.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from coloco_cli.demo.net import start_ledger
from coloco_cli.procs import ProcessManager
from protocol.devnet import AnvilProcess
from protocol.display import cms, eth

pytestmark = [pytest.mark.integration, pytest.mark.anvil, pytest.mark.timeout(900)]

CHROMIUM = Path(os.environ.get("COLOCO_CHROMIUM", "/usr/bin/chromium"))
ARTEFACTS = Path(__file__).resolve().parents[2] / "reports" / "dashboard"


@pytest.fixture(scope="module")
def dashboard(
    demo_run: tuple[dict[str, Any], Path], demo_chain: AnvilProcess
) -> Iterator[tuple[str, dict[str, Any]]]:
    report, work = demo_run
    run_dir = work / "run"
    with ProcessManager(handle_signals=False) as procs:
        url, _ = start_ledger(
            procs, run_dir, demo_chain, run_dir / "deployment.json", round_deadline_s=90
        )
        yield url, report


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        pytest.skip(f"no chromium at {CHROMIUM}: `make setup` installs Debian's chromium")
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                      args=["--no-sandbox", "--disable-gpu"])  # fmt: skip
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, dashboard: tuple[str, dict[str, Any]]) -> Iterator[Any]:
    """A page that records every request; none may go anywhere but the ledger."""
    url, _ = dashboard
    ledger_host = urlparse(url).netloc
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    pg = context.new_page()
    outside: list[str] = []
    pg.on("request", lambda req: outside.append(req.url) if urlparse(req.url).netloc not in
          (ledger_host, "") else None)  # fmt: skip
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert outside == [], f"the dashboard fetched from outside the ledger: {outside}"
    assert errors == [], f"JavaScript errors: {errors}"


def _shot(page: Any, name: str) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / f"{name}.png"), full_page=True)


def test_dashboard_runs_and_live_rounds(page: Any, dashboard: tuple[str, dict[str, Any]]) -> None:
    url, report = dashboard
    page.goto(url + "/")
    run_id = report["run_id"].lower()
    row = page.locator(f'#runs-body tr[data-run="{run_id}"]')
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == report["run_name"], cells  # the run by its name, the hex id second
    assert cells[1] == run_id[:10], cells
    assert cells[2] == str(report["rounds_committed"]), cells  # last committed round
    # live: static/live.js refreshes the table from ?format=json
    page.wait_for_function(
        "document.getElementById('live-stamp').textContent.startsWith('updated')", timeout=15000
    )
    assert page.locator(f'#runs-body tr[data-run="{run_id}"]').count() == 1
    _shot(page, "index")
    data = httpx.get(url + "/?format=json", timeout=10).json()
    assert data["runs"][0]["run_id"] == run_id
    committed = [r for r in data["runs"][0]["rounds"] if r["state"] in ("committed", "final")]
    assert len(committed) >= report["rounds_committed"]


def test_dashboard_run_page_loss_curve_and_sample(
    page: Any, dashboard: tuple[str, dict[str, Any]]
) -> None:
    url, report = dashboard
    run_id = report["run_id"].lower()
    page.goto(f"{url}/runs/{run_id}")
    assert page.locator("#loss-curve circle").count() >= 2
    losses = page.locator("#loss-table tbody tr").all_inner_texts()
    assert len(losses) >= report["rounds_committed"]
    assert page.locator("#sample").inner_text().startswith("def ")
    assert report["run_name"] in page.locator("h1").inner_text()
    # each round: the CMS it paid and the config version it trained under (the vote's effect)
    rows = page.locator("#rounds tbody tr")
    versions = {v for v in rows.locator("td.config").all_inner_texts() if v != "-"}
    before, after = report["config_version_before"], report["config_version_after"]
    assert {str(before), str(after)} <= versions, versions
    paid = [p for p in rows.locator("td.paid").all_inner_texts() if p != "0 CMS"]
    assert paid and all(re.fullmatch(r"[\d,]+(\.\d{1,4})? CMS", p) for p in paid), paid
    _shot(page, "run")
    data = httpx.get(f"{url}/runs/{run_id}?format=json", timeout=60).json()
    curve = data["loss_curve"]
    assert curve[0]["round"] == 0 and curve[-1]["eval_loss"] < curve[0]["eval_loss"], curve
    worked = {n["node"].lower() for n in report["nodes"] if n["rounds_worked"]}
    assert {n["node"].lower() for n in data["nodes"]} == worked


def test_dashboard_nodes_stake_rounds_and_receipts(
    page: Any, dashboard: tuple[str, dict[str, Any]]
) -> None:
    url, report = dashboard
    page.goto(url + "/nodes")
    rows = page.locator("#nodes tbody tr")
    assert rows.count() >= 2
    _shot(page, "nodes")
    nodes = httpx.get(url + "/nodes?format=json", timeout=30).json()["nodes"]
    by_node = {n["node"].lower(): n for n in nodes}
    for node in report["nodes"]:
        if node["rounds_worked"]:
            seen = by_node[node["node"].lower()]
            assert seen["rounds_worked"] == node["rounds_worked"], (seen, node)
            assert int(seen["stake"]) > 0 and seen["active"] is True  # wei: a decimal string
    first = report["nodes"][0]
    page.goto(f"{url}/nodes/{first['node']}")
    receipts = page.locator("#receipts tbody tr")
    assert receipts.count() == first["rounds_worked"]
    rewarded = httpx.get(f"{url}/nodes/{first['node']}?format=json", timeout=30).json()
    assert sum(int(r["reward"]) for r in rewarded["receipts"]) == int(first["owed"])
    _shot(page, "node")


def test_dashboard_proposals_and_how_to_claim_and_vote(
    page: Any, dashboard: tuple[str, dict[str, Any]]
) -> None:
    url, _ = dashboard
    page.goto(url + "/proposals")
    text = page.locator("#proposals").inner_text()
    assert "Executed" in text, text  # the demo's vote went through
    # what it does, decoded as `coloco gov status` shows it, and that nothing more can happen
    assert "TrainingConfig.setInnerLoop(inner-steps=" in text, text
    assert "final: nothing more can happen" in text, text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC \((opened|opens in) ", text), text
    _shot(page, "proposals")
    page.goto(url + "/how-to")
    typed = page.locator("#typed-data").inner_text()
    assert '"primaryType": "ComputeAttestation"' in typed
    assert "coloco rewards claim" in page.locator("#claim-commands").inner_text()
    assert "coloco gov vote" in page.locator("#vote-commands").inner_text()
    _shot(page, "how-to")


def test_dashboard_capital_and_code_contributors(
    page: Any, dashboard: tuple[str, dict[str, Any]]
) -> None:
    """The backer's capital receipts and the developer's code receipts, as the report has them."""
    url, report = dashboard
    voters = {v["kind"]: v["address"] for v in report["three_kinds_vote"]["voters"]}
    backer, coder = voters["capital"], voters["code"]
    page.goto(url + "/contributors")
    assert page.locator(f'#contributors tr[data-address="{backer}"]').count() == 1
    assert page.locator(f'#contributors tr[data-address="{coder}"]').count() == 1
    _shot(page, "contributors")
    page.goto(f"{url}/contributors/{backer}")
    deposited = report["funding"]["backer"]["deposited_wei"]
    capital = page.locator("#capital-receipts tbody").inner_text()
    assert eth(deposited) in capital and report["run_name"] in capital, capital
    _shot(page, "contributor-capital")
    page.goto(f"{url}/contributors/{coder}")
    claimed = page.locator("#code-receipts tbody .state-claimed")
    assert claimed.count() == 1, page.locator("#code-receipts").inner_text()
    _shot(page, "contributor-code")


def test_dashboard_assets_ship_with_the_package() -> None:
    """No CDN: the stylesheet and script are package files with their licence beside them."""
    import ledger.dashboard.routes as routes

    for name in ("dashboard.css", "live.js", "LICENSE"):
        assert (routes.STATIC_DIR / name).is_file()
    templates = routes.HERE / "templates"
    for html in templates.glob("*.html"):
        assert "http://" not in html.read_text() and "https://" not in html.read_text(), html
    assert shutil.which("chromium") or CHROMIUM.is_file()


# a run of 16+ decimal digits that is not part of a hex string: an amount in wei or token units
RAW_WEI = re.compile(r"(?<![0-9A-Fa-fx])\d{16,}(?![0-9A-Fa-f])")
UNIX_TIME = re.compile(r"(?<![0-9A-Fa-fx.,])17\d{8}(?![0-9A-Fa-f])")  # unix seconds of 2023-2033
# every element whose right edge passes the viewport, unless a scrolling card holds it; at
# desktop widths no card may need to scroll either; no table row squeezed taller than 200 px
OVERFLOW_JS = """(strict) => {
  const vw = window.innerWidth, out = [];
  if (document.documentElement.scrollWidth > vw)
    out.push(`document ${document.documentElement.scrollWidth}px > ${vw}px`);
  const clipped = (el) => {
    for (let a = el.parentElement; a; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if (ox === "auto" || ox === "scroll" || ox === "hidden") return a;
    }
    return null;
  };
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    if (box.width === 0) continue;
    const holder = clipped(el);
    if (!holder && box.right > vw + 0.5)
      out.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className} right ${box.right}px`);
    if (el.tagName === "TR" && box.height > 200)  // squeezed columns: rows hundreds of px tall
      out.push(`a table row ${Math.round(box.height)}px tall: ${el.innerText.slice(0, 40)}`);
    const scrolls = holder && holder.scrollWidth > holder.clientWidth + 1;
    if (strict && scrolls && el === holder.firstElementChild)
      out.push(`.${holder.className} scrolls: ${holder.scrollWidth} > ${holder.clientWidth}px`);
  }
  return out.slice(0, 8);
}"""


def _pages(url: str, report: dict[str, Any]) -> list[str]:
    voters = {v["kind"]: v["address"] for v in report["three_kinds_vote"]["voters"]}
    return [
        "/", f"/runs/{report['run_id'].lower()}", "/nodes", f"/nodes/{report['nodes'][0]['node']}",
        "/contributors", f"/contributors/{voters['capital']}", f"/contributors/{voters['code']}",
        "/proposals", "/how-to", "/market",
    ]  # fmt: skip


@pytest.mark.parametrize("width", [1920, 1400, 420])
def test_dashboard_fits_the_screen_and_shows_human_units(
    browser: Any, dashboard: tuple[str, dict[str, Any]], width: int
) -> None:
    """At 1920 and 1400 px (no card scrolls) and at 420 px (a table may scroll in its card): no
    element wider than the viewport on any page, and no raw wei or unix time in any page's text."""
    url, report = dashboard
    context = browser.new_context(viewport={"width": width, "height": 900})
    pg = context.new_page()
    problems: dict[str, list[str]] = {}
    try:
        for path in _pages(url, report):
            pg.goto(url + path)
            pg.wait_for_load_state("networkidle")
            found = pg.evaluate(OVERFLOW_JS, width >= 1000)
            text = pg.locator("body").inner_text()
            found += [f"raw amount {m}" for m in RAW_WEI.findall(text)]
            found += [f"unix time {m}" for m in UNIX_TIME.findall(text)]
            if found:
                problems[path] = found
            if width < 1000:
                _shot(pg, f"narrow-{path.strip('/').split('/')[0] or 'index'}")
    finally:
        context.close()
    assert problems == {}, problems
    assert cms(750 * 10**18) == "750 CMS" and eth(25 * 10**14) == "0.0025 ETH"
