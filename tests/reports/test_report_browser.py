"""The HTML report in headless Chromium: no broken images, no console errors, not blank.

A test copy of the page gets a small inline checker script (the report itself has none) that
records errors and console.error calls, and after load decides for every <img> whether it
rendered: loaded, non-zero natural size, and drawn onto a canvas mostly opaque (a truncated PNG
has a valid header and a size, but draws nothing). The verdict is written into the DOM and read
back with --dump-dom; Chromium's own console log (stderr) is scanned as well. The same checks
run on a deliberately damaged copy of the report and must fail there.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from browser_helpers import chromium, needs_chromium
from report_helpers import write_synthetic_report

pytestmark = needs_chromium
NUM_PLOTS = 10  # seven per-run plots (sharing and preemptions shown), two sweep plots, calibration

CHECKER = """<script>
window.__pagesimErrors = [];
window.addEventListener("error", function (e) {
  var t = e.target;
  if (t && t !== window && t.tagName) {
    window.__pagesimErrors.push("failed to load " + t.tagName + " " + (t.alt || ""));
  } else {
    window.__pagesimErrors.push("error: " + e.message);
  }
}, true);
window.addEventListener("unhandledrejection", function (e) {
  window.__pagesimErrors.push("unhandled rejection: " + e.reason);
});
var __pagesimConsoleError = console.error;
console.error = function () {
  window.__pagesimErrors.push("console.error: " + Array.prototype.join.call(arguments, " "));
  __pagesimConsoleError.apply(console, arguments);
};
function __pagesimRendered(img) {
  if (!img.complete || img.naturalWidth === 0 || img.naturalHeight === 0) { return false; }
  var c = document.createElement("canvas");
  c.width = 48; c.height = 48;
  var g = c.getContext("2d");
  g.drawImage(img, 0, 0, 48, 48);
  var d = g.getImageData(0, 0, 48, 48).data, opaque = 0;
  for (var k = 3; k < d.length; k += 4) { if (d[k] > 0) { opaque++; } }
  return opaque >= 0.9 * 48 * 48;
}
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !__pagesimRendered(i); })
                   .map(function (i) { return i.alt || i.src.slice(0, 60); });
  var out = document.createElement("pre");
  out.id = "pagesim-check";
  out.textContent = JSON.stringify(
    {images: imgs.length, broken: broken, errors: window.__pagesimErrors});
  document.body.appendChild(out);
});
</script>"""


@dataclass(frozen=True)
class PageCheck:
    images: int
    broken: list[str]
    errors: list[str]  # seen by the checker script
    console: list[str]  # Chromium's console log lines on stderr


def check_page(page: Path, work: Path) -> PageCheck:
    """Load a checker-instrumented copy of `page` (same folder, so relative links behave alike)."""
    copy = page.with_name(f"checked-{page.name}")
    copy.write_text(page.read_text().replace("<head>", "<head>" + CHECKER, 1))
    run = chromium(
        [
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            copy.as_uri(),
        ],
        work / "profile-dom",
    )
    found = re.search(r'<pre id="pagesim-check">(.*?)</pre>', run.stdout, re.S)
    assert found, f"the checker never reported (rc {run.returncode}):\n{run.stderr[-2000:]}"
    verdict = json.loads(html.unescape(found.group(1)))
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    return PageCheck(verdict["images"], verdict["broken"], verdict["errors"], console)


def assert_page_ok(check: PageCheck, expected_images: int) -> None:
    assert check.images == expected_images, check
    assert check.broken == [], f"broken images: {check.broken}"
    assert check.errors == [], f"page errors: {check.errors}"
    assert check.console == [], f"console messages: {check.console}"


def is_blank(pixels: np.ndarray) -> bool:
    """True when an RGB(A) image is one flat color: tiny variance or almost no off-color pixels."""
    gray = pixels[..., :3].astype(float).mean(axis=-1)
    if gray.max() > 1.0:
        gray /= 255.0
    background = np.median(gray)
    return bool(gray.var() < 1e-4 or np.mean(np.abs(gray - background) > 0.05) < 0.005)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the synthetic report page (written once per session; test_reports.py shares
    it), in a folder of this module's own, where the checker's copies are written too."""
    html = tmp_path_factory.getbasetemp() / "synthetic-report" / "report.html"
    if not html.exists():
        write_synthetic_report(html.parent)
    page = tmp_path_factory.mktemp("browser") / "report.html"
    page.write_text(html.read_text())
    return page


@pytest.fixture(scope="module")
def damaged_check(report: Path, tmp_path_factory: pytest.TempPathFactory) -> PageCheck:
    """The report with a truncated PNG, an image pointing at a missing file and a failing script."""
    text = report.read_text()
    uris = re.findall(r'src="(data:image/png;base64,[^"]+)"', text)
    text = text.replace(uris[0], uris[0][:3000], 1)  # a PNG cut short: header and size intact
    text = text.replace(uris[1], "plots/missing.png", 1)
    text = text.replace(
        "</body>", '<script>console.error("boom"); undefinedCall();</script></body>'
    )
    damaged = report.with_name("damaged.html")
    damaged.write_text(text)
    return check_page(damaged, tmp_path_factory.mktemp("damaged"))


def test_report_loads_with_no_broken_images_or_console_errors(report: Path, tmp_path: Path) -> None:
    assert_page_ok(check_page(report, tmp_path), expected_images=NUM_PLOTS)


def test_report_screenshot_is_not_blank(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    run = chromium(
        [f"--screenshot={shot}", "--window-size=1280,2000", report.as_uri()], tmp_path / "profile"
    )
    assert shot.is_file(), f"no screenshot (rc {run.returncode}):\n{run.stderr[-2000:]}"
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (2000, 1280)
    assert not is_blank(pixels)


def test_a_broken_image_fails_the_check(damaged_check: PageCheck) -> None:
    assert len(damaged_check.broken) == 2, damaged_check.broken
    with pytest.raises(AssertionError, match="broken images"):
        assert_page_ok(damaged_check, expected_images=NUM_PLOTS)


def test_a_console_error_fails_the_check(damaged_check: PageCheck) -> None:
    assert any("boom" in e for e in damaged_check.errors), damaged_check.errors
    assert any("undefinedCall" in e for e in damaged_check.errors), damaged_check.errors
    assert any("boom" in line for line in damaged_check.console), damaged_check.console
    images_fixed = PageCheck(NUM_PLOTS, [], damaged_check.errors, damaged_check.console)
    with pytest.raises(AssertionError, match="page errors"):
        assert_page_ok(images_fixed, expected_images=NUM_PLOTS)


def test_blank_detector_rejects_flat_images() -> None:
    assert is_blank(np.ones((200, 300, 3)))
    assert is_blank(np.full((200, 300, 4), 0.5))
    page = np.ones((200, 300, 3))
    page[40:60, 20:280] = 0.1  # a line of text
    assert not is_blank(page)


# Issue 14 item 9: the provenance key column was squeezed to two characters (`pagesim_version`
# wrapped letter by letter) and the sweep table's headers wrapped mid-word. A column is readable
# when every cell is at least as wide as its longest word, as Chromium lays the page out.
TABLE_CHECKER = """<script>
window.addEventListener("load", function () {
  var g = document.createElement("canvas").getContext("2d"), narrow = [], cells = 0;
  ["provenance", "sweep"].forEach(function (id) {
    var section = document.getElementById(id);
    if (!section) { narrow.push("no section " + id); return; }
    section.querySelectorAll("th, td").forEach(function (cell) {
      var style = getComputedStyle(cell);
      g.font = style.font;
      var room = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      cell.textContent.split(/\\s+/).forEach(function (word) {
        var need = g.measureText(word).width;
        cells++;
        if (need > room + 1) {
          narrow.push(id + ": '" + word + "' needs " + need.toFixed(0) + " px, has " + room);
        }
      });
    });
  });
  var out = document.createElement("pre");
  out.id = "pagesim-tables";
  out.textContent = JSON.stringify({words: cells, narrow: narrow});
  document.body.appendChild(out);
});
</script>"""
SQUEEZED = "<style>th{overflow-wrap:anywhere;max-width:24px}</style>"  # the old, broken layout


def narrow_columns(page: Path, work: Path, extra: str = "") -> tuple[int, list[str]]:
    """(words measured, the cells of the provenance and sweep tables narrower than a word)."""
    copy = page.with_name(f"tables-{page.name}")
    copy.write_text(page.read_text().replace("<head>", "<head>" + TABLE_CHECKER + extra, 1))
    run = chromium(
        ["--virtual-time-budget=10000", "--window-size=1280,2000", "--dump-dom", copy.as_uri()],
        work / "profile-tables",
    )
    found = re.search(r'<pre id="pagesim-tables">(.*?)</pre>', run.stdout, re.S)
    assert found, f"the table checker never reported (rc {run.returncode}):\n{run.stderr[-2000:]}"
    verdict = json.loads(html.unescape(found.group(1)))
    return verdict["words"], verdict["narrow"]


def test_provenance_and_sweep_tables_are_readable(report: Path, tmp_path: Path) -> None:
    words, narrow = narrow_columns(report, tmp_path)
    assert words > 100 and narrow == []
    _, squeezed = narrow_columns(report, tmp_path / "squeezed", SQUEEZED)
    for section in ("provenance", "sweep"):  # the check fails on the old layout
        assert any(line.startswith(f"{section}: ") for line in squeezed), squeezed
