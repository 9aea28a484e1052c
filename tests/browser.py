"""Open a --glm5-html page in headless Chromium (Debian's package, driven by Playwright): what it logged, what
it asked the network for, whether every chart drew, its first paint, and a screenshot."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

# Each canvas: how many of its pixels are not blank (a chart that drew has its lines and labels there).
INKED = """() => [...document.querySelectorAll('.uplot canvas')].map(c => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
  return n;
})"""


# The page's first contentful paint, ms after navigation start (-1: none within 10 s).
FIRST_PAINT = """() => new Promise(resolve => {
  new PerformanceObserver(list => {
    const e = list.getEntries().find(x => x.name === 'first-contentful-paint');
    if (e) resolve(e.startTime);
  }).observe({type: 'paint', buffered: true});
  setTimeout(() => resolve(-1), 10000);
})"""


@dataclass
class Opened:
    """What one page load showed."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, the file itself included
    expected: int = 0  # charts the page set out to draw
    drawn: int = 0
    inked: list[int] = field(default_factory=list)  # non-blank pixels per chart canvas
    first_paint_ms: float = 0.0
    table_rows: list[str] = field(default_factory=list)
    table_clipped: bool = False  # the verdict table's box hides rows behind a scroll bar
    legends: list[list[str]] = field(default_factory=list)  # each chart's series labels, in page order
    energy: list[str] = field(default_factory=list)  # the energy lines, as the page shows them
    night: list[str] = field(default_factory=list)  # the night's lines under the headline (schedule, not run, budget)

    @property
    def outside(self) -> list[str]:
        """Requests that would leave the file."""
        return [u for u in self.requests if not u.startswith(("file:", "data:"))]


def open_page(path: Path, screenshot: Path | None = None, width: int = 1400, height: int = 1000) -> Opened:
    """Load the page, scroll through it (charts draw as they come into view), and report."""
    from playwright.sync_api import sync_playwright

    out = Opened()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda m: out.errors.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: out.errors.append(f"page error: {e}"))
            page.on("request", lambda r: out.requests.append(r.url))
            page.route("http*://**", lambda route: route.abort())  # nothing may reach a network
            page.goto(path.resolve().as_uri(), wait_until="load")
            out.first_paint_ms = float(page.evaluate(FIRST_PAINT))
            if screenshot is not None:
                page.wait_for_timeout(200)
                page.screenshot(path=str(screenshot))
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            y = 0
            while y < int(page.evaluate("() => document.body.scrollHeight")) + height:  # it grows as charts draw
                page.evaluate(f"() => window.scrollTo(0, {y})")
                page.wait_for_timeout(20)
                y += height // 2
            page.wait_for_function("() => window.glm5 && window.glm5.drawn === window.glm5.expected", timeout=60_000)
            out.expected = int(page.evaluate("() => window.glm5.expected"))
            out.drawn = int(page.evaluate("() => window.glm5.drawn"))
            out.inked = [int(x) for x in page.evaluate(INKED)]
            out.table_rows = [str(x) for x in page.evaluate(
                "() => [...document.querySelectorAll('#verdict-table tbody tr')].map(r => r.innerText)")]
            out.table_clipped = bool(page.evaluate(
                "() => { const w = document.querySelector('.tablewrap'); "
                "return w.scrollHeight > w.clientHeight + 1; }"))
            out.legends = [[str(x) for x in labels] for labels in page.evaluate(
                "() => [...document.querySelectorAll('.uplot')].map(u => "
                "[...u.querySelectorAll('.u-legend .u-label')].map(l => l.textContent))")]
            out.energy = [str(x) for x in page.evaluate(
                "() => [...document.querySelectorAll('ul.energy li')].map(l => l.innerText)")]
            out.night = [str(x) for x in page.evaluate(
                "() => [...document.querySelectorAll('ul.night li')].map(l => l.innerText)")]
        finally:
            browser.close()
    return out
