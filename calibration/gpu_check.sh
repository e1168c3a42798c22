#!/usr/bin/env bash
# One device call: install, preflight, the GPU tests, the kernel benchmark and a quick
# Llama-2-7B calibration. Each stage writes its results into $OUT as it ends (gpu_common.sh).
#
# How to run it, from the repository root, with the device tool (one H200):
#   run(command="bash calibration/gpu_check.sh", carry=[".whl"], timeout_s=400)
# .whl holds a simpy wheel: the image has CuPy (cupy-cuda13x), torch, numpy, pandas, typer,
# matplotlib, pytest(-xdist), setuptools and wheel, but not simpy, and reaches no registry.
# Prepare it once, here (simpy is pure Python, so any platform's pip fetches the right wheel):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy==4.1.1
# Offline install (the install stage does it): python3 -m pip install --no-index --no-deps
#   --no-build-isolation .whl/*.whl, then the same with -e . (the image's setuptools builds it;
#   should that fail, symlinks under /tmp mirror the package layout, with PYTHONSAFEPATH=1).
# Without a GPU machine: the `gpu` extra (pip install -e '.[gpu]') is CuPy for CUDA 13 and torch;
# '.[gpu-cuda12]' for CUDA 12.
#
# Budget (seconds; each stage is killed at its budget, the next still runs):
#   stage            expected   budget
#   install_wheels      ~3        15    (only with .whl/)
#   install             ~10       30    (failing, links to the checkout are tried: install_check)
#   install_check       ~1        15    (only then; a failure stops the script)
#   nvidia-smi          ~1         6
#   preflight           ~15       30    (a failure stops the script: one line says why)
#   gpu_tests           ~60       90    (pytest -m gpu, 4 workers when pytest-xdist is there)
#   bench               ~45       65    (Llama-2-7B, Llama-3-8B, Llama-2-70B: see gpu_stages.bench)
#   calibrate           ~40       75    (quick, Llama-2-7B, block size 16)
#   after each of 7 stages: packing $OUT/all.tar.gz (<1 s, at most 4) and 2 s of kill grace
#   worst case: 15+30+15+6+30+90+65+75 + 7x(4+2) = 368 s (6.1 min); expected about 3 min.
# With a machine start of 1-2 minutes, a 15-minute device budget holds this call and one full
# rerun (2 + 6.1 + 6.1 = 14.2 min); PAGESIM_ONLY="bench calibrate" reruns only those stages
# (install and preflight always run). Use timeout_s=400.
#
# $OUT afterwards (7 files at most, flat): summary.txt (every stage's start, end, status and key
# figures, written as they come), preflight.txt, gpu_tests.log, bench.csv,
# llama-2-7b-<gpu>.json and .csv (the profile: commit both under calibration/profiles/),
# all.tar.gz (every log and file of every stage, re-packed after each stage).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.." || exit 2  # the repository root: the install, the tests and .whl/ are there
# shellcheck source=calibration/gpu_common.sh
source "$HERE/gpu_common.sh"

install_stage
preflight_stage False 40

GPU=$(gpu_name)
PROFILE="$WORK/calibrate/llama-2-7b-$GPU.json"

if wanted gpu_tests; then
  PARALLEL=()
  "$PY" -c "import xdist" 2> /dev/null && PARALLEL=(-n 4 --dist loadfile)
  TESTS=(tests/)
  if ! "$PY" -c "import simpy" 2> /dev/null; then  # most test modules import the engine
    note "## simpy is absent (no .whl/): only the kernel's and the executor's GPU tests run"
    TESTS=(tests/calibration/test_gpu_kernel.py tests/calibration/test_gpu_executor.py)
  fi
  run_stage gpu_tests 90 "$PY" -m pytest -m gpu -q -p no:cacheprovider --durations=10 \
    "${PARALLEL[@]}" "${TESTS[@]}"
  cp -f "$WORK/logs/gpu_tests.log" "$OUT/gpu_tests.log"
fi

if wanted bench; then
  run_stage bench 65 "$PY" -c \
    "from pagesim.calibration.gpu_stages import bench; bench('$WORK/bench')"
  keep "$WORK/bench/bench.csv"
fi

if wanted calibrate; then
  run_stage calibrate 75 "$PY" -c \
    "from pagesim.calibration.gpu_stages import calibrate; calibrate('llama-2-7b', '$PROFILE')"
  keep "$PROFILE" "${PROFILE%.json}.csv"
fi

finish
