"""Dry runs of the GPU scripts on the CPU, under a fake `python3` and `nvidia-smi`.

The fake python3 succeeds (leaving a file in its stage's folder, and the profile and CSV the
later stages read), fails or hangs in the stage named by FAKE_FAIL / FAKE_HANG; the fake
nvidia-smi answers, fails or hangs. Every stage's budget is scaled down (PAGESIM_BUDGET_SCALE)
so a hang costs a fraction of a second. Checked, for each script and each stage in turn: a
failed install or preflight stops the script at once with one clear line and runs nothing
else; any other stage that fails or hangs is cut at its budget and the next stage still runs;
$OUT holds what finished (at most 8 files, flat) and the summary says what happened; no stage
outlasts its budget; the budget table in each script's header is the one the script uses. A
failed editable install falls back to links to the checkout (install_check), which stops the
script only if it fails too.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {"gpu_check": ROOT / "calibration" / "gpu_check.sh"}
SCRIPTS["fidelity_check"] = ROOT / "calibration" / "fidelity_check.sh"
STAGES = {
    "gpu_check": ["install", "preflight", "gpu_tests", "bench", "calibrate"],
    "fidelity_check": [
        "install",
        "preflight",
        "executor_tests",
        "calibrate",
        "sharegpt_eager",
        "sharegpt_graphs",
        "azure_eager",
    ],
}
STOPPING = {"preflight"}
SCALE = 0.01  # a 100 s budget becomes 1 s
KILL_GRACE_S, PACK_S = 2, 4  # gpu_common.sh's fixed seconds (not scaled)
SLACK_S = 1.5  # process start-up and bookkeeping on a loaded 2-core CI machine

FAKE_PYTHON = r"""#!/usr/bin/env bash
stage=${PAGESIM_STAGE:-none}
echo "fake python3 ($stage): $*"
case " ${FAKE_FAIL:-} " in *" $stage "*)
  [ "$stage" = preflight ] && echo "## PREFLIGHT FAILED: device: CuPy sees no CUDA device"
  echo "## $stage: FAILED: fake"; exit 3 ;;
esac
case " ${FAKE_HANG:-} " in *" $stage "*)
  echo "## $stage: hanging"; sleep 1000 & wait; exit 0 ;;
esac
[ "$stage" = none ] && exit 0
echo "## $stage: fake figures"
echo ok > "$PAGESIM_STAGE_DIR/fake-$stage.txt"
case $stage in
  bench) echo "model,time_s" > "$PAGESIM_STAGE_DIR/bench.csv" ;;
  calibrate)
    json=$(printf '%s' "$*" | grep -o "'[^']*\.json'" | tr -d "'")
    echo '{}' > "$json"; echo 'kind,time_s' > "${json%.json}.csv" ;;
esac
exit 0
"""

FAKE_SMI = r"""#!/usr/bin/env bash
case ${FAKE_SMI:-ok} in
  hang) sleep 1000 ;;
  fail) echo "NVIDIA-SMI has failed" >&2; exit 9 ;;
esac
echo "NVIDIA H200, 580.159.03, 143771 MiB, 0 MiB, 345 MHz, 1980 MHz"
"""


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fakebin")
    for name, text in (("python3", FAKE_PYTHON), ("nvidia-smi", FAKE_SMI)):
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder


def _run(script: str, fakes: Path, tmp: Path, **env: str) -> tuple[int, str, Path, float]:
    out, work, cwd = tmp / "out", tmp / "work", tmp / "checkout"
    cwd.mkdir(exist_ok=True)
    environment = {
        **os.environ,
        "PATH": f"{fakes}:{os.environ['PATH']}",
        "OUT": str(out),
        "PAGESIM_PYTHON": str(fakes / "python3"),
        "PAGESIM_WORK": str(work),
        "PAGESIM_BUDGET_SCALE": str(SCALE),
        **env,
    }
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPTS[script])],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - started
    return done.returncode, (out / "summary.txt").read_text(), out, took


def _budgets(summary: str) -> dict[str, float]:
    return {
        m[1]: float(m[2]) for m in re.finditer(r"=== (\w+): starts at .*, budget (\S+) s", summary)
    }


def _took(summary: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(r"=== (\w+): .*after (\S+) s", summary)}


def _files(out: Path) -> list[str]:
    found = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert len(found) <= 8, found
    assert all(p.parent == out for p in out.rglob("*") if p.is_file()), "files are flat"
    return found


def _check_budgets(summary: str, took_total: float) -> None:
    budgets, took = _budgets(summary), _took(summary)
    assert set(took) == set(budgets)
    for stage, seconds in took.items():
        limit = budgets[stage] * SCALE + KILL_GRACE_S
        assert seconds <= limit + SLACK_S, f"{stage} took {seconds} s, over {limit} s"
    worst = sum(b * SCALE for b in budgets.values()) + len(budgets) * (KILL_GRACE_S + PACK_S)
    assert took_total <= worst + 6 + SLACK_S * len(budgets)  # + nvidia-smi's 6 s at most


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_everything_succeeds(script: str, fakes: Path, tmp_path: Path) -> None:
    rc, summary, out, took = _run(script, fakes, tmp_path)
    assert rc == 0, summary
    for stage in STAGES[script]:
        assert f"=== {stage}: ok after" in summary
        assert f"## {stage}: fake figures" in summary  # key lines reach the summary
    assert "## nvidia-smi (at" in summary and "NVIDIA H200" in summary
    files = _files(out)
    expected = {"summary.txt", "preflight.txt", "all.tar.gz"}
    expected |= {"llama-2-7b-h200.json", "llama-2-7b-h200.csv"}
    if script == "gpu_check":
        expected |= {"gpu_tests.log", "bench.csv"}
    assert set(files) == expected
    with tarfile.open(out / "all.tar.gz") as archive:
        names = archive.getnames()
    for stage in STAGES[script]:
        assert any(n.endswith(f"logs/{stage}.log") for n in names), stage
        assert any(n.endswith(f"{stage}/fake-{stage}.txt") for n in names), stage
    _check_budgets(summary, took)


def test_a_failed_install_falls_back_to_links(fakes: Path, tmp_path: Path) -> None:
    rc, summary, _, took = _run("gpu_check", fakes, tmp_path, FAKE_FAIL="install")
    assert rc == 0 and "=== install: FAILED (exit 3)" in summary
    assert "importing the checkout through links instead" in summary
    assert "=== install_check: ok after" in summary and "=== calibrate: ok after" in summary
    links = tmp_path / "work" / "site" / "pagesim"
    assert (links / "simulator").resolve() == ROOT / "simulator"
    assert (links / "cli.py").resolve() == ROOT / "pagesim" / "cli.py"
    _check_budgets(summary, took)


def test_links_to_the_checkout_import_pagesim(fakes: Path, tmp_path: Path) -> None:
    """The fallback's layout really imports: a real python3 on the links, run in the checkout
    (whose own pagesim/ holds only the CLI and must not shadow them)."""
    import sys

    _run("gpu_check", fakes, tmp_path, FAKE_FAIL="install")
    site = tmp_path / "work" / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONPATH=str(site), PYTHONSAFEPATH="1", PYTHONNOUSERSITE="1")
    code = "import pagesim.simulator.engine, pagesim.calibration.gpu_stages as g; print(g.__file__)"
    # numpy, simpy, ... from this interpreter's site-packages, without its .pth files (-S: no
    # editable install) and without the checkout itself on the path
    outside = [p for p in sys.path[1:] if p and not p.startswith(str(ROOT))]
    done = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path += {outside!r}; {code}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(site))


@pytest.mark.parametrize(
    ("script", "stage"),
    [(s, stage) for s in sorted(SCRIPTS) for stage in STAGES[s]]
    + [("gpu_check", "install install_check")],
)
def test_a_failing_stage(script: str, stage: str, fakes: Path, tmp_path: Path) -> None:
    rc, summary, out, took = _run(script, fakes, tmp_path, FAKE_FAIL=stage)
    stages = STAGES[script]
    if stage == "install install_check":
        assert rc == 2 and "STOP: neither the offline install nor links" in summary
        assert "=== preflight" not in summary
        assert set(_files(out)) == {"summary.txt", "all.tar.gz"}
        return
    later = stages[stages.index(stage) + 1 :]
    assert f"=== {stage}: FAILED (exit 3)" in summary
    if stage in STOPPING:
        assert rc == 2
        (stop,) = [line for line in summary.splitlines() if line.startswith("STOP: ")]
        if stage == "preflight":
            assert "device: CuPy sees no CUDA device" in stop and "nothing else" in stop
        assert not any(f"=== {s}:" in summary for s in later), "nothing runs after a stop"
    else:
        assert rc == 0
        earlier = stages[: stages.index(stage)]
        assert all(f"=== {s}: ok after" in summary for s in earlier)
        if stage == "calibrate" and script == "fidelity_check":
            assert all(f"=== {s}: skipped: no profile" in summary for s in later)
        elif stage != "install":  # a failed install is followed by install_check first
            assert all(f"=== {s}: ok after" in summary for s in later)
    files = _files(out)
    assert {"summary.txt", "all.tar.gz", "preflight.txt"} <= set(files)
    _check_budgets(summary, took)


@pytest.mark.parametrize(
    ("script", "stage"),
    [(s, stage) for s in sorted(SCRIPTS) for stage in STAGES[s] if stage != "install"],
)
def test_a_hanging_stage_is_cut_at_its_budget(
    script: str, stage: str, fakes: Path, tmp_path: Path
) -> None:
    rc, summary, out, took = _run(script, fakes, tmp_path, FAKE_HANG=stage)
    assert re.search(rf"=== {stage}: TIMED OUT at its \S+ s budget", summary), summary
    assert f"## {stage}: hanging" in summary  # what it said before the cut is kept
    stages = STAGES[script]
    if stage == "preflight":
        assert rc == 2 and "STOP: preflight failed" in summary
    else:
        assert rc == 0
        later = stages[stages.index(stage) + 1 :]
        if not (stage == "calibrate" and script == "fidelity_check"):
            assert all(f"=== {s}: ok after" in summary for s in later)
    _files(out)
    _check_budgets(summary, took)


@pytest.mark.parametrize("mode", ["hang", "fail"])
def test_nvidia_smi_that_hangs_or_fails_costs_its_timeout_only(
    mode: str, fakes: Path, tmp_path: Path
) -> None:
    rc, summary, out, took = _run("gpu_check", fakes, tmp_path, FAKE_SMI=mode)
    assert rc == 0
    assert "## nvidia-smi (at" in summary and "failed or timed out" in summary
    assert "llama-2-7b-gpu.json" in _files(out)  # the GPU's name falls back to "gpu"
    _check_budgets(summary, took)


def test_a_rerun_of_some_stages(fakes: Path, tmp_path: Path) -> None:
    rc, summary, _, _ = _run(
        "fidelity_check", fakes, tmp_path, PAGESIM_ONLY="calibrate azure_eager"
    )
    assert rc == 0
    ran = [m[1] for m in re.finditer(r"=== (\w+): ok after", summary)]
    assert ran == ["install", "preflight", "calibrate", "azure_eager"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_header_budget_table_is_the_one_used(script: str, fakes: Path, tmp_path: Path) -> None:
    header = SCRIPTS[script].read_text().split("set -uo pipefail")[0]
    table = {
        m[1]: float(m[2])
        for m in re.finditer(r"^#   (\w[\w-]*)\s+~\d+\s+(\d+)\s", header, re.MULTILINE)
    }
    (worst,) = re.findall(r"worst case: ([\d+x() ]+) = (\d+) s", header)
    rc, summary, _, _ = _run(script, fakes, tmp_path)
    assert rc == 0
    used = _budgets(summary)
    used["nvidia-smi"] = 6
    # install_wheels runs only with .whl/ (absent here), install_check only after a failed
    # install: the table lists both, this run uses neither
    assert {k: v for k, v in table.items() if k not in ("install_wheels", "install_check")} == used
    terms, total = worst
    assert eval(terms.replace("x", "*")) == int(total)
    stages = len(table) - 1  # every stage but nvidia-smi packs and has a kill grace
    assert int(total) == sum(table.values()) + stages * (PACK_S + KILL_GRACE_S)


# ---------------------------------------------------------------- the stages' Python side


def test_preflight_without_a_gpu_stops_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from pagesim.calibration import gpu_stages

    with pytest.raises(SystemExit) as stopped:
        gpu_stages.preflight(False, 1.0)
    assert stopped.value.code == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("## PREFLIGHT FAILED: ")
    assert "CuPy" in lines[-1] or "device" in lines[-1]


def test_a_stage_that_fails_says_so_in_one_summary_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from pagesim.calibration import gpu_stages

    with pytest.raises(SystemExit) as stopped:
        gpu_stages.calibrate("llama-2-7b", str(tmp_path / "p.json"))
    assert stopped.value.code == 1
    captured = capsys.readouterr()
    summary = [line for line in captured.out.splitlines() if line.startswith("## ")]
    assert summary[-1].startswith("## calibrate: FAILED: PagesimError:")
    assert "Traceback" in captured.err  # the details go to the log, not the summary


def test_the_gpu_extra_names_cupy_for_cuda_13() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]
    assert any(d.startswith("cupy-cuda13x") for d in extras["gpu"])
    assert any(d.startswith("cupy-cuda12x") for d in extras["gpu-cuda12"])


def test_the_fidelity_scenarios_in_the_script_load(tmp_path: Path) -> None:
    from pagesim.simulator.scenario.load import load_scenario

    text = SCRIPTS["fidelity_check"].read_text()
    found = re.findall(r"cat > \"\$SCENARIOS/(\w+)\.toml\" <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    assert [name for name, _ in found] == ["sharegpt", "azure"]
    for name, body in found:
        path = tmp_path / f"{name}.toml"
        path.write_text(body)
        scenario = load_scenario(path)
        assert scenario.model.name == "llama-2-7b"
        assert scenario.systems[0].gpu_memory_utilization == 0.75
