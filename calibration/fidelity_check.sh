#!/usr/bin/env bash
# One device call: the fidelity check of issue 7 on the GPU. Llama-2-7B (all 32 layers executed),
# a quick cupy profile calibrated first on its own grid (held out from the scenarios' steps), then
# two scenarios simulated with that profile and executed for real over the same scheduler's block
# tables: a ShareGPT-like Poisson workload (vllm-v0) and a slice of the Azure conversation trace
# (vllm-v1, chunked prefill). Everything lands under $OUT:
#   versions.txt  gpu_tests.log  calibrate.log  llama-2-7b-<gpu>.json/.csv
#   sharegpt/ and azure/: fidelity.html  fidelity_scatter.png  fidelity_steps.csv  fidelity.json
#                         simulated/ measured/ (requests.csv, steps.csv, summary.json)  run.log
#   fidelity_summary.txt  (the figures of both scenarios, also printed at the end)
# (all packed into $OUT/fidelity_all.tar.gz; the summary, versions and profile also lie beside it)
#
# How to run it (from the repository root, with the device tool):
#   run(command="bash calibration/fidelity_check.sh", carry=[".whl"], timeout_s=600)
# The device image has CuPy, torch, numpy and pytest but not simpy, which the engine needs: carry
# a simpy wheel in .whl/ (prepare it once, here, as for gpu_check.sh):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy==4.1.1
# Expected: about 5 minutes on an H200 (GPU tests ~1 min with NVRTC compiles, calibration ~1.5-2
# min, ShareGPT ~1-1.5 min, Azure ~1 min). Stage timeouts (90+180+150+120 s) end the call before
# ~9.5 minutes even if every stage hangs; use timeout_s=600. Acceptance (issue 7): median step
# error <= 5% and E2E p95 error <= 5% on both scenarios.
set -uo pipefail

# The device returns at most 8 files from $OUT, so the many files of the two runs are written to a
# work folder and packed on exit: $OUT gets fidelity_summary.txt, versions.txt, the profile
# (JSON + CSV of samples) and fidelity_all.tar.gz (everything, logs included).
FINAL="${OUT:-$PWD/fidelity_out}"
OUT=/tmp/fidelity_work
rm -rf "$OUT"
mkdir -p "$OUT" "$FINAL"
pack() {
  for f in fidelity_summary.txt versions.txt llama-2-7b-*.json llama-2-7b-*.csv; do
    for g in "$OUT"/$f; do [ -f "$g" ] && cp "$g" "$FINAL/"; done
  done
  tar czf "$FINAL/fidelity_all.tar.gz" -C "$(dirname "$OUT")" "$(basename "$OUT")"
  ls -la "$FINAL"
}
trap pack EXIT
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=python3
started=$(date +%s)
stage() { echo "=== $1 ($(( $(date +%s) - started )) s)"; }

if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if ! $PY -c "import simpy" 2> /dev/null; then
  echo "simpy is not installed: carry a simpy wheel in .whl/ (see the header); stopping"
  exit 2
fi

stage "versions"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
      --format=csv 2>&1
  $PY -c "import numpy, cupy, simpy; print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'simpy', simpy.__version__)"
  $PY -c "import torch; print('torch', torch.__version__)" 2>&1
  git rev-parse HEAD 2>/dev/null || true
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
  | tr '[:upper:]' '[:lower:]' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/-$//')
GPU_NAME=${GPU_NAME:-gpu}
PROFILE="$OUT/llama-2-7b-$GPU_NAME.json"

stage "GPU tests of the executor (NaN-poisoned unmapped blocks, a short loop)"
timeout 90 $PY -m pytest -m gpu -q -p no:cacheprovider tests/test_fidelity.py 2>&1 \
  | tee "$OUT/gpu_tests.log"
echo "pytest exit: ${PIPESTATUS[0]}" | tee -a "$OUT/gpu_tests.log"

stage "quick calibration (llama-2-7b, block size 16)"
timeout 180 $PY -m pagesim.calibration.run --model llama-2-7b --backend cupy --quick \
    --out "$PROFILE" 2>&1 | tee "$OUT/calibrate.log"
echo "calibrate exit: ${PIPESTATUS[0]}" | tee -a "$OUT/calibrate.log"

# Scenarios. gpu_memory_utilization 0.75 leaves room for the executor's own random weights
# (~13 GiB) and workspaces beside a KV pool of every block the scheduler may use (~90 GiB).
cat > "$OUT/sharegpt.toml" <<'EOF'
name = "fidelity_sharegpt_llama2_7b"
description = "ShareGPT-like traffic (vLLM paper means, lognormal CV 1) on Llama-2-7B / H200, vLLM V0."
seed = 0
[model]
preset = "llama-2-7b"
[gpu]
preset = "h200-sxm"
[workload]
num_requests = 120  # ~20 s of arrivals, ~3-4k steps
[workload.arrival]
kind = "poisson"
rate_per_s = 6.0
[workload.prompt]
kind = "lognormal"
mean = 161.31
cv = 1.0
[workload.output]
kind = "lognormal"
mean = 337.99
cv = 1.0
[[systems]]
name = "vllm-v0"
policy = "vllm-v0"
gpu_memory_utilization = 0.75
EOF
cat > "$OUT/azure.toml" <<'EOF'
name = "fidelity_azure_conv_llama2_7b"
description = "Azure conversation trace 2023, first 100 rows replayed 2x fast, on Llama-2-7B / H200, vLLM V1 chunked prefill."
seed = 0
[model]
preset = "llama-2-7b"  # 4,096-token context: the few longer prompts are rejected, and said so
[gpu]
preset = "h200-sxm"
[workload]
trace = "azure-conv"
trace_offset = 0
num_requests = 100
time_scale = 2.0
[workload.arrival]
kind = "trace"
[workload.prompt]
kind = "trace"
[workload.output]
kind = "trace"
[[systems]]
name = "vllm-v1-chunked"
policy = "vllm-v1"
max_num_batched_tokens = 512
gpu_memory_utilization = 0.75
EOF

run_check() {  # name, timeout
  mkdir -p "$OUT/$1"
  timeout "$2" $PY - "$OUT/$1.toml" "$PROFILE" "$OUT/$1" <<'EOF' 2>&1 | tee "$OUT/$1/run.log"
import sys
import warnings
from pathlib import Path

from calibration.fidelity import run_fidelity
from reports.fidelity import write_fidelity_report
from simulator.execution.profile import ProfileExtrapolationWarning
from simulator.scenario.load import load_scenario

scenario_path, profile, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
warnings.simplefilter("ignore", ProfileExtrapolationWarning)
result = run_fidelity(
    load_scenario(scenario_path),
    profile=profile,
    backend="cupy",
    out=out,
    progress=lambda line: print(line, flush=True),
)
print("report:", write_fidelity_report(result, out))
e = result.step_error
print(f"{result.scenario} on {result.device} ({result.layer_subset}), {result.wall_s} s")
print(f"  step time ({e.num_steps} steps): median |err| {e.median_abs_pct:.2f}%  "
      f"p90 |err| {e.p90_abs_pct:.2f}%  bias {e.bias_pct:+.2f}%")
for r in result.request_errors:
    print(f"  {r.metric.upper():4s} {r.quantile}: simulated {r.simulated_s:.4f} s  "
          f"measured {r.measured_s:.4f} s  error {r.pct_error:+.2f}%")
h = result.held_out
print(f"  held out: {h.calibration}; inside range {h.fraction_inside_range}; "
      f"on grid points {h.fraction_on_grid_points}")
EOF
  echo "$1 exit: ${PIPESTATUS[0]}" | tee -a "$OUT/$1/run.log"
}

if [ -f "$PROFILE" ]; then
  stage "fidelity: ShareGPT-like"
  run_check sharegpt 150
  stage "fidelity: Azure conversation slice"
  run_check azure 120
else
  echo "no profile was written: skipping the fidelity runs"
fi

stage "summary"
grep -h -E "^fidelity_|^  " "$OUT"/sharegpt/run.log "$OUT"/azure/run.log 2>/dev/null \
  > "$OUT/fidelity_summary.txt"
cat "$OUT/fidelity_summary.txt"
stage "done"
ls -la "$OUT"
