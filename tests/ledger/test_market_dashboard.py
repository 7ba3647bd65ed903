"""The dashboard's market page in a real browser (Playwright, Debian's chromium) on a real ledger
(uvicorn, anvil deployment, SQLite) holding real signed offers: the offers table, a request's
ranking with every reason, a bad field named, at the widths the other pages are checked at
(tests/integration/test_dashboard.py: nothing wider than the screen, no raw wei or unix time)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness.nodes import NodeKey
from ledger.service import Ledger
from protocol.eip712 import Eip712Domain
from protocol.offer import label_bytes32
from tests.integration.test_dashboard import OVERFLOW_JS, RAW_WEI, UNIX_TIME
from tests.ledger.conftest import serving
from tests.ledger.test_market_api import body, make_offer

CHROMIUM = Path(os.environ.get("COLOCO_CHROMIUM", "/usr/bin/chromium"))
ARTEFACTS = Path(__file__).resolve().parents[2] / "reports" / "dashboard"
GIB = 2**30


@pytest.fixture
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
def market_url(ledger: Ledger, nodes: list[NodeKey], domain: Eip712Domain) -> Iterator[str]:
    with serving(ledger) as url:
        ledger.indexer.catch_up()
        h200 = {"device_count": 8, "memory_bytes": 141 * GIB, "price_per_device_hour": 2 * 10**15}
        offers = [
            make_offer(nodes[0], **h200),
            make_offer(nodes[1], device_count=4, memory_bytes=24 * GIB),
            make_offer(nodes[2], device_kind=label_bytes32("nvidia-a100"), bandwidth=10**7),
        ]
        for node, offer in zip(nodes, offers, strict=True):
            r = httpx.post(f"{url}/v1/market/offers", json=body(node, offer, domain))
            assert r.status_code == 202, r.text
        yield url


def test_market_page_offers_and_a_ranking(
    browser: Any, market_url: str, nodes: list[NodeKey]
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{market_url}/")
        page.click("header nav a[href='market']")
        page.wait_for_selector("#offers")
        rows = page.locator("#offers tbody tr")
        assert rows.count() == 3
        text = page.locator("#offers").inner_text()
        assert "141 GiB" in text and "50 TFLOP/s" in text and "0.002 ETH" in text
        assert "10 Mbit/s" in text and "nvidia-a100" in text
        page.fill("input[name=devices]", "8")
        page.fill("input[name=memory_gib]", "40")
        page.fill("input[name=bandwidth_mbit]", "100")
        page.click("#request button[type=submit]")
        page.wait_for_selector("#ranking-summary")
        summary = page.locator("#ranking-summary").inner_text()
        assert summary.startswith("Filled: 8 of 8 devices for 4 h, 0.064 ETH"), summary
        chosen = page.locator("#chosen tbody tr")
        assert chosen.count() == 1 and "8 x nvidia-h200" in chosen.inner_text()
        reasons = page.locator("#not-chosen").inner_text()
        assert "memory" in reasons and "24 GiB per device, below the 40 GiB" in reasons
        assert "bandwidth" in reasons and "10 Mbit/s, below the 100 Mbit/s" in reasons
        page.fill("input[name=hours]", "many")
        page.click("#request button[type=submit]")
        page.wait_for_selector("#request-error")
        assert "hours: write a number" in page.locator("#request-error").inner_text()
    finally:
        context.close()
    assert errors == []


@pytest.mark.parametrize("width", [1920, 1400, 420])
def test_market_page_fits_the_screen_and_shows_human_units(
    browser: Any, market_url: str, width: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        page.goto(
            f"{market_url}/market?devices=16&memory_gib=40&bandwidth_mbit=100&hours=4&budget_eth=0.05"
        )
        page.wait_for_load_state("networkidle")
        found = page.evaluate(OVERFLOW_JS, width >= 1000)
        text = page.locator("body").inner_text()
        found += [f"raw amount {m}" for m in RAW_WEI.findall(text)]
        found += [f"unix time {m}" for m in UNIX_TIME.findall(text)]
        assert "over_budget" in text and "Not filled" in text
        if width < 1000:
            ARTEFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTEFACTS / "narrow-market.png"), full_page=True)
    finally:
        context.close()
    assert found == [], found
