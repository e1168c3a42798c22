"""Installed, pagesim is one import name that nothing in the user's folders can shadow.

The tree is copied to a folder named `pagesim` (as `git clone <repo> pagesim` makes), installed
into fresh virtual environments, editable and regular, and the `pagesim` command runs a scenario
and a two-job sweep from three places: the clone, the folder holding it (where the clone itself
looks like a `pagesim` namespace package), and a folder with its own `pagesim/`, `simulator/`,
`scenarios/` and `reports/` packages that fail loudly if anything imports them.

The fresh environments see this environment's site-packages (through a `.pth` line) for the
dependencies, so nothing but pagesim's own build is downloaded.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DECOYS = ("pagesim", "simulator", "scenarios", "reports", "calibration")
TIMEOUT_S = 300

pytestmark = pytest.mark.slow


def _tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("needs a git checkout to copy the tracked files")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def _copy_clone(dest: Path) -> None:
    for path in _tracked_files():
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        target = dest / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def _outer_pip_targets() -> bool:
    """Whether this environment's pip can install into another interpreter (`pip --python`,
    pip 22.3 on): then the fresh environments need no pip of their own (~4 s of CPU each)."""
    try:
        major, minor = (int(part) for part in version("pip").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (22, 3)


def _pip(bin_dir: Path) -> list[str]:
    """The pip command that installs into the environment of `bin_dir`."""
    if _outer_pip_targets():
        return [sys.executable, "-m", "pip", "--python", str(bin_dir / "python")]
    return [str(bin_dir / "python"), "-m", "pip"]


def _make_venv(where: Path) -> Path:
    seed = ["--without-pip"] if _outer_pip_targets() else []
    subprocess.run([sys.executable, "-m", "venv", *seed, str(where)], check=True, timeout=TIMEOUT_S)
    lib = next((where / "lib").glob("python3*")) / "site-packages"
    # Dependencies (numpy, pandas, simpy, ...) come from this environment, after the venv's own.
    (lib / "outer_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return where / "bin"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env["MPLBACKEND"] = "Agg"
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("install")
    holder = base / "holder"
    clone = holder / "pagesim"
    _copy_clone(clone)
    decoy = base / "decoy"
    for name in DECOYS:
        (decoy / name).mkdir(parents=True)
        (decoy / name / "__init__.py").write_text(
            f"raise ImportError('the decoy {name}/ in {decoy} was imported')\n"
        )
    return {"clone": clone, "holder": holder, "decoy": decoy, "base": base}


@pytest.fixture(scope="module", params=["editable", "regular"])
def installed(request: pytest.FixtureRequest, places: dict[str, Path]) -> Path:
    bin_dir = _make_venv(places["base"] / f"venv-{request.param}")
    target = ["-e", str(places["clone"])] if request.param == "editable" else [str(places["clone"])]
    done = _run([*_pip(bin_dir), "install", "-q", "--no-deps", *target], places["base"])
    assert done.returncode == 0, done.stdout + done.stderr
    return bin_dir


@pytest.mark.parametrize("where", ["clone", "holder", "decoy"])
def test_run_and_a_two_job_sweep_work_from_anywhere(
    installed: Path, places: dict[str, Path], where: str
) -> None:
    cwd = places[where]
    out = places["base"] / f"out-{installed.parent.name}-{where}"
    tiny = ["--set", "workload.num_requests=12"]
    # The report (matplotlib, a few seconds) is drawn once per install, from the clone.
    report = [] if where == "clone" else ["--no-report"]
    ran = _run(
        [str(installed / "pagesim"), "run", "textbook_static_vs_continuous", "--out",
         str(out / "run"), *report],
        cwd,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (out / "run" / ("report.html" if where == "clone" else "static/summary.json")).is_file()
    swept = _run(
        [str(installed / "pagesim"), "sweep", "block_size_ablation", "--jobs", "2", "--out",
         str(out / "sweep"), "--param", "systems.block_size=8,16,32", *tiny],
        cwd,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert "3 simulated" in swept.stdout + swept.stderr


def test_only_pagesim_is_importable(installed: Path, places: dict[str, Path]) -> None:
    python = str(installed / "python")
    where = _run([python, "-c", "import pagesim.simulator.engine as e; print(e.__file__)"],
                 places["base"])  # fmt: skip
    assert where.returncode == 0, where.stderr
    location = Path(where.stdout.strip())
    if installed.parent.name.endswith("editable"):
        assert location.is_relative_to(places["clone"])
    else:
        assert location.is_relative_to(installed.parent)
    for name in ("simulator", "calibration", "reports", "scenarios", "kernels"):
        tried = _run([python, "-c", f"import {name}"], places["base"])
        assert tried.returncode != 0, f"`import {name}` worked after installing pagesim"
        assert "ModuleNotFoundError" in tried.stderr


def test_a_shipped_benchmark_is_timed_from_anywhere(
    installed: Path, places: dict[str, Path]
) -> None:
    # Vidur's case C (scenarios/benchmarks/) ships as package data, trace and all; the timed
    # child process finds the installed pagesim, not the decoys in the working directory.
    done = _run(
        [str(installed / "pagesim"), "bench", "sim", "vidur_case_c/sarathi", "--set",
         "workload.num_requests=5"],
        places["decoy"],
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "system sarathi-512: 5 requests" in done.stdout
