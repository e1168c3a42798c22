"""The block map page in headless Chromium, opened from a file with the network cut off.

A test copy of each page gets a checker script that, once the page has loaded, records the step
it opened on, then moves the slider through every step (as a person dragging it would: value
set, `input` event sent) and reads what the page then shows: the step, the blocks drawn as held,
the block-table rows and the events listed. Python compares each with the block map itself.
The checker also presses play and sees the step advance, lists every resource the page loaded
(none may be: no fetch, no image, no script from anywhere) and collects script errors. A copy
of a page that loads an image from the web must fail the same checks.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from browser_helpers import chromium, needs_chromium

from pagesim.reports.tour import write_tour
from pagesim.simulator.metrics.block_map import BlockMap
from pagesim.simulator.studies.tour import STOPS, Visited, visit

pytestmark = needs_chromium
# A proxy nobody listens on and no name resolves: anything the page asked of the network fails.
OFFLINE = (
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)

CHECKER = """<script>
window.__errors = [];
window.addEventListener("error", function (e) {
  window.__errors.push(String(e.message || e.type));
}, true);
window.addEventListener("load", function () {
  var out = {opened: blockMap.summary().index, visits: [], errors: window.__errors};
  var slider = document.getElementById("slider");
  for (var i = 0; i < blockMap.count; i++) {
    slider.value = String(i);
    slider.dispatchEvent(new Event("input"));
    var s = blockMap.summary();
    out.visits.push([s.index, s.step, s.counts.used, s.rows,
      document.querySelectorAll("#gpu-grid .b.used").length,
      document.querySelectorAll("#events li").length]);
  }
  slider.value = "0";
  slider.dispatchEvent(new Event("input"));
  document.getElementById("play").click();
  setTimeout(function () {
    out.played_to = blockMap.summary().index;
    blockMap.stop();
    out.resources = performance.getEntriesByType("resource").map(function (r) { return r.name; });
    var pre = document.createElement("pre");
    pre.id = "block-map-check";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 1500);
});
</script>"""


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple[BlockMap, int]]]:
    """The tour written once: its folder, and each page's map and opening step by page path."""
    out = tmp_path_factory.mktemp("tour")
    wanted = (
        "01_static_vs_continuous",
        "04_parallel_sampling",
        "05_preempt_swap",
        "07_orca_vs_paged",
    )
    visited: list[Visited] = [visit(i) for i, (stem, _, _) in enumerate(STOPS) if stem in wanted]
    write_tour(visited, out)
    pages = {
        f"{stop.name}/{m.about.system}.html": (m, moment.index)
        for stop in visited
        for m, moment in stop.maps
    }
    return out, pages


def check(page: Path, work: Path) -> dict[str, object]:
    copy = page.with_name(f"checked-{page.name}")
    copy.write_text(page.read_text().replace("<head>", "<head>" + CHECKER, 1))
    run = chromium([*OFFLINE, "--virtual-time-budget=20000", "--dump-dom", copy.as_uri()], work)
    found = re.search(r'<pre id="block-map-check">(.*?)</pre>', run.stdout, re.S)
    assert found, f"the checker never reported (rc {run.returncode}):\n{run.stderr[-2000:]}"
    verdict: dict[str, object] = json.loads(html.unescape(found.group(1)))
    return verdict


def expected(block_map: BlockMap) -> list[list[int]]:
    """What the page must show at each step: [index, step, blocks held, rows, cells drawn
    held, events listed]."""
    rows = []
    bs = block_map.about.block_size
    for i, (record, state) in enumerate(zip(block_map.steps, block_map.states(), strict=True)):
        if block_map.about.kind == "paged":
            used = sum(1 for r in state.ref_counts if r)
            num_rows = len(state.seqs)
        else:
            cells = {
                c
                for r in state.regions.values()
                for c in range(r.offset // bs, (r.offset + r.num_held - 1) // bs + 1)
            }
            used, num_rows = len(cells), len(state.regions)
        rows.append([i, record.step, used, num_rows, used, max(1, len(record.events))])
    return rows


@pytest.mark.parametrize(
    "name",
    [
        "01_static_vs_continuous/static.html",
        "04_parallel_sampling/vllm-v0.html",
        "05_preempt_swap/vllm-v0-swap.html",
        "07_orca_vs_paged/vllm-v1.html",
    ],
)
def test_the_slider_walks_every_step_offline(
    tour: tuple[Path, dict[str, tuple[BlockMap, int]]], name: str, tmp_path: Path
) -> None:
    out, pages = tour
    block_map, open_at = pages[name]
    verdict = check(out / name, tmp_path)
    assert verdict["errors"] == []
    assert verdict["opened"] == open_at
    assert verdict["visits"] == expected(block_map)
    assert isinstance(verdict["played_to"], int) and verdict["played_to"] > 0
    assert verdict["resources"] == []


def test_the_pages_name_nothing_on_the_network(
    tour: tuple[Path, dict[str, tuple[BlockMap, int]]],
) -> None:
    out, _ = tour
    pages = sorted(out.rglob("*.html"))
    assert len(pages) >= 6
    for page in pages:
        text = page.read_text()
        assert not re.search(r"(?i)\b(https?|ftp|wss?):", text), page
        for target in re.findall(r'(?:src|href)="([^"]*)"', text):
            assert not target.startswith("//") and ":" not in target, (page, target)


def test_a_page_that_loads_from_the_web_fails_the_check(
    tour: tuple[Path, dict[str, tuple[BlockMap, int]]], tmp_path: Path
) -> None:
    out, _ = tour
    page = out / "04_parallel_sampling" / "vllm-v0.html"
    tampered = page.with_name("tampered.html")
    tampered.write_text(
        page.read_text().replace("</main>", '<img src="https://example.com/x.png" alt=""></main>')
    )
    verdict = check(tampered, tmp_path)
    assert verdict["resources"] == ["https://example.com/x.png"]
