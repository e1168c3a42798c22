#!/usr/bin/env bash
# One device call: versions, the GPU tests, the kernel benchmark (Llama-2-7B MHA and Llama-3-8B
# GQA head configurations, every shape >= 16k KV tokens) and a quick Llama-2-7B calibration.
# Everything lands flat under $OUT (8 files):
#   versions.txt  gpu_tests.log  bench.log  bench.csv  calibrate.log  llama-2-7b-<gpu>.json/.csv/.png
#
# How to run it (from the repository root, with the device tool):
#   run(command="bash calibration/gpu_check.sh", carry=[".whl"], timeout_s=600)
# Expected: about 5 minutes on an H200 (tests ~2 min including NVRTC compiles, benchmark ~1 min,
# calibration ~1-2 min); each stage has its own timeout (20+45 + 180+120+180+30 s), so the call
# ends before ~9.6 minutes even if every stage hangs; use timeout_s=600. A stage that fails or
# times out leaves its log, and the next stage still runs (each is its own process, so a CUDA
# error that poisons one process's context does not reach the next). The summary prints last.
#
# The device image has CuPy, torch, numpy and pytest but not simpy. The calibration, the
# benchmark and tests/test_gpu_kernel.py never import simpy; to run `pytest -m gpu` over all of
# tests/, carry a simpy wheel (pure Python) in .whl/ — prepare it once, here:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy==4.1.1
# Without it the script runs the GPU tests of tests/test_gpu_kernel.py only, and says so.
#
# Fetch the profile afterwards and commit it with its CSV under calibration/profiles/.
# The fidelity check of issue 7 (Llama-2-7B executed for real vs simulated) does not fit this
# call's budget: it has its own, calibration/fidelity_check.sh (about 5 minutes).
set -uo pipefail

OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=python3
started=$(date +%s)
stage() { echo "=== $1 ($(( $(date +%s) - started )) s)"; }

if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

stage "versions"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  timeout 20 nvidia-smi \
      --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
      --format=csv 2>&1
  nvcc --version 2>&1 | tail -1
  timeout 45 $PY - <<'EOF'
import platform
print("python", platform.python_version())
for name in ("numpy", "cupy", "torch", "simpy", "pytest"):
    try:
        module = __import__(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:  # report, do not stop
        print(name, "absent:", type(exc).__name__)
try:
    import cupy
    print("cuda runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver",
          cupy.cuda.runtime.driverGetVersion())
except Exception as exc:
    print("cupy runtime:", exc)
from calibration.kernel import kernel_sha256
print("kernel sha256", kernel_sha256())
EOF
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

GPU_NAME=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
  | tr '[:upper:]' '[:lower:]' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/-$//')
GPU_NAME=${GPU_NAME:-gpu}

stage "GPU tests"
if $PY -c "import simpy" 2> /dev/null; then
  TESTS=(tests/)
else
  echo "simpy is not installed: running the GPU tests of tests/test_gpu_kernel.py only"
  TESTS=(tests/test_gpu_kernel.py)
fi
timeout 180 $PY -m pytest -m gpu -q -p no:cacheprovider --durations=12 "${TESTS[@]}" 2>&1 \
  | tee "$OUT/gpu_tests.log"
echo "pytest exit: ${PIPESTATUS[0]}" | tee -a "$OUT/gpu_tests.log"

stage "kernel benchmark"
timeout 120 $PY -m pagesim.calibration.bench --model llama-2-7b --model llama-3-8b \
    --out "$OUT/bench.csv" 2>&1 | tee "$OUT/bench.log"
echo "bench exit: ${PIPESTATUS[0]}" | tee -a "$OUT/bench.log"

stage "quick calibration (llama-2-7b)"
timeout 180 $PY -m pagesim.calibration.run --model llama-2-7b --backend cupy --quick \
    --out "$OUT/llama-2-7b-$GPU_NAME.json" 2>&1 | tee "$OUT/calibrate.log"
echo "calibrate exit: ${PIPESTATUS[0]}" | tee -a "$OUT/calibrate.log"

stage "calibration plot"
MPLBACKEND=Agg timeout 30 $PY - "$OUT/llama-2-7b-$GPU_NAME.json" <<'EOF' || echo "no plot"
import sys
from pathlib import Path

from calibration.profile import calibration_panels
from reports.curves import plot_calibration

path = Path(sys.argv[1])
print(plot_calibration(calibration_panels(path), path.with_suffix(".png")))
EOF

stage "done"
ls -la "$OUT"
echo "=== summary"
grep -E "passed|failed|skipped|error|pytest exit" "$OUT/gpu_tests.log" | tail -4
grep -E "copy bandwidth| S=|bench exit|error" "$OUT/bench.log"
tail -3 "$OUT/calibrate.log"
