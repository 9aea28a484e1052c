"""Screenshot a --glm5-html page in headless Chromium (what docs/report.png is made with):

    python scripts/screenshot.py r.html docs/report.png
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from browser import open_page


def main(argv: list[str]) -> int:
    """Open the page, print what it showed, save the top of it."""
    if len(argv) != 2:
        print("usage: python scripts/screenshot.py PAGE.html OUT.png", file=sys.stderr)
        return 2
    opened = open_page(Path(argv[0]), screenshot=Path(argv[1]), width=1400, height=1100)
    print(f"{argv[0]}: {opened.drawn} of {opened.expected} charts drawn, first paint {opened.first_paint_ms:.0f} ms, "
          f"{len(opened.errors)} console errors, {len(opened.outside)} requests outside the file")
    return 0 if not opened.errors and not opened.outside and opened.drawn == opened.expected else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
