"""Full-page screenshot of the HTML report in headless Chromium, checked for content wider than the page.

  python scripts/report_screenshot.py <results dir or csv> --out docs/images/report_cpu.png
      [--reference refs/cpu.csv] [--width 1400] [--html report.html]

Renders the report as `benchmark.py report` does, opens it in headless Chromium twice: once to measure it (a
copy of the page with a small script that writes the page's height and every element reaching past the
viewport's right edge into the DOM, read back with --dump-dom), once to take the screenshot at that height, so
the PNG holds the whole page. The report itself stays script-free; only the measuring copy carries the script.

Exit 0: screenshot written, nothing overflows. 1: screenshot written, but the page is wider than the viewport
(the offending elements are listed). 2: usage or input error, or no Chromium (Debian/Ubuntu:
`apt-get install -y chromium`; or point TUNEBENCH_CHROMIUM at the binary).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunebench.results.compare.reading import CompareInputError  # noqa: E402
from tunebench.results.report.page import write_report  # noqa: E402

logger = logging.getLogger(__name__)

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# The flags every run gets: no sandbox (root in a container), nothing fetched or synced in the background.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")
MARKER_ID = "tunebench-layout"
TIMEOUT_S = 120
# Runs at load (images decoded and laid out). Lists each element whose box reaches past the viewport's right
# edge (or starts left of 0), so a failure names the table or image that is too wide, not only "too wide".
PROBE = """<script>
window.addEventListener("load", () => {
  const root = document.documentElement, width = root.clientWidth, wide = [];
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width && (box.right > width + 0.5 || box.left < -0.5)) {
      const cls = typeof el.className === "string" && el.className ? "." + el.className.split(" ")[0] : "";
      wide.push(`${el.tagName.toLowerCase()}${cls} ${Math.round(box.left)}..${Math.round(box.right)} px`);
    }
  }
  const out = document.createElement("pre");
  out.id = "MARKER_ID";
  out.textContent = JSON.stringify({scrollWidth: root.scrollWidth, clientWidth: width,
                                    innerWidth: window.innerWidth, height: root.scrollHeight, overflowing: wide});
  document.body.appendChild(out);
});
</script>""".replace("MARKER_ID", MARKER_ID)


class ChromiumMissing(RuntimeError):
    """No Chromium binary: the message says how to install one."""


def find_chromium() -> str:
    """TUNEBENCH_CHROMIUM, else the first Chromium/Chrome binary on PATH."""
    given = os.environ.get("TUNEBENCH_CHROMIUM")
    if given:
        if shutil.which(given):
            return shutil.which(given)
        raise ChromiumMissing(f"TUNEBENCH_CHROMIUM={given} is not an executable")
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise ChromiumMissing("no Chromium found on PATH (looked for " + ", ".join(CANDIDATES) + "): install it "
                          "(Debian/Ubuntu: apt-get install -y chromium) or set TUNEBENCH_CHROMIUM to its path")


def _chromium(binary: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="tunebench-chromium-") as profile:  # a fresh profile every run
        done = subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done


def measure(page: Path, width: int, binary: str | None = None) -> dict:
    """Layout of `page` at `width` CSS px: scrollWidth, clientWidth, height and the overflowing elements."""
    binary = binary or find_chromium()
    with tempfile.TemporaryDirectory(prefix="tunebench-probe-") as folder:
        probe = Path(folder) / "probe.html"
        text = page.read_text()
        probe.write_text(text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE)
        dom = _chromium(binary, f"--window-size={width},900", "--virtual-time-budget=10000", "--dump-dom",
                        probe.as_uri()).stdout
    start = dom.find(f'id="{MARKER_ID}">')
    if start < 0:
        raise RuntimeError("the measuring script left no result in the page (did Chromium run its script?)")
    payload = dom[start + len(f'id="{MARKER_ID}">'):dom.index("</pre>", start)]
    return json.loads(payload.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


def screenshot(page: Path, out: Path, width: int, height: int, binary: str | None = None) -> Path:
    """A PNG of `page` at width × height CSS px (height: the whole page, from `measure`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    _chromium(binary or find_chromium(), f"--window-size={width},{height}", f"--screenshot={out.resolve()}",
              page.as_uri())
    if not out.is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {out}")
    return out


def overflow_problems(layout: dict) -> list[str]:
    """What is wider than the page, in words; empty when everything fits."""
    problems = []
    if layout["scrollWidth"] > layout["clientWidth"]:
        problems.append(f"the page is {layout['scrollWidth']} px wide in a {layout['clientWidth']} px viewport")
    problems += [f"{element} reaches past the viewport" for element in layout["overflowing"][:20]]
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", help="results directory (uses raw_summary.csv) or a CSV")
    p.add_argument("--out", required=True, help="PNG to write, e.g. docs/images/report_cpu.png")
    p.add_argument("--reference", default=None, help="also compare with this reference CSV (as `report` does)")
    p.add_argument("--width", type=int, default=1400, help="viewport width in CSS px (default 1400)")
    p.add_argument("--html", default=None, help="keep the rendered report here (default: a temporary file)")
    args = p.parse_args(argv)
    try:
        binary = find_chromium()
    except ChromiumMissing as exc:
        print(f"report_screenshot: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tunebench-report-") as folder:
        page = Path(args.html) if args.html else Path(folder) / "report.html"
        try:
            write_report(args.results, page, args.reference)
        except CompareInputError as exc:
            print(f"report_screenshot: {exc}", file=sys.stderr)
            return 2
        layout = measure(page, args.width, binary)
        out = screenshot(page, Path(args.out), args.width, layout["height"], binary)
    problems = overflow_problems(layout)
    print(f"{out}: {args.width} x {layout['height']} px", file=sys.stderr)
    for problem in problems:
        print(f"report_screenshot: overflow: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
