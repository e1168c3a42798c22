# shellcheck shell=bash
# Sourced by calibration/gpu_check.sh and calibration/fidelity_check.sh: stages with budgets, and
# results in $OUT as each stage ends (never only in an exit trap: a hard kill keeps what finished).
#
#   run_stage NAME BUDGET_S COMMAND...   the command under `timeout` (TERM at the budget, KILL
#                                        2 s later, its whole process group); its output goes to
#                                        stdout and $WORK/logs/NAME.log, and every line starting
#                                        with "## " also to $OUT/summary.txt as it comes; then the
#                                        work folder is packed into $OUT/all.tar.gz (4 s at most)
#   keep FILE                            copies FILE into $OUT (one of its few files)
#
# Environment: OUT (the device tool's result folder; at most 8 files, 2 folders deep: these
# scripts write 7 at most, flat), PAGESIM_PYTHON (default python3), PAGESIM_ONLY (run only these
# stages, space-separated; install and preflight always run: for a rerun that must be short),
# PAGESIM_BUDGET_SCALE (multiplies every stage's budget, not the fixed pack and kill-grace
# seconds: the CPU dry-run test, tests/calibration/test_gpu_scripts.py, shrinks them; 1 on a GPU).

set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/gpu_out}"
PY="${PAGESIM_PYTHON:-python3}"
SCALE="${PAGESIM_BUDGET_SCALE:-1}"
WORK="${PAGESIM_WORK:-/tmp/pagesim_gpu_work}"
KILL_GRACE_S=2
PACK_S=4
SMI_LINE=""
STARTED=$(date +%s.%N)
STAGE_RC=0
mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK/logs"
: > "$OUT/summary.txt"

scaled() { awk -v b="$1" -v s="$SCALE" 'BEGIN { printf "%.3f", b * s }'; }
elapsed() { awk -v t0="$STARTED" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }'; }
note() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }

wanted() {  # wanted STAGE: false when PAGESIM_ONLY is set and does not name it
  [ -z "${PAGESIM_ONLY:-}" ] && return 0
  case " $PAGESIM_ONLY " in *" $1 "*) return 0 ;; esac
  return 1
}

pack() {  # the whole work folder, every log included, as $OUT/all.tar.gz (atomic replace)
  if timeout -k 1 "$PACK_S" tar czf "$WORK.tar.gz" -C "$(dirname "$WORK")" \
      "$(basename "$WORK")" 2> /dev/null; then
    mv -f "$WORK.tar.gz" "$OUT/all.tar.gz"
  else
    note "(packing the work folder failed or timed out; $OUT/all.tar.gz is the previous one)"
  fi
}

keep() {  # keep FILE...: copy into $OUT when present
  local f
  for f in "$@"; do
    [ -f "$f" ] && cp -f "$f" "$OUT/"
  done
  return 0
}

run_stage() {  # run_stage NAME BUDGET_S COMMAND...
  local name=$1 budget=$2
  shift 2
  local t0 rc took
  t0=$(date +%s.%N)
  mkdir -p "$WORK/$name"
  note "=== $name: starts at $(elapsed) s, budget ${budget} s"
  PAGESIM_STAGE="$name" PAGESIM_STAGE_DIR="$WORK/$name" \
    timeout -k "$KILL_GRACE_S" "$(scaled "$budget")" "$@" < /dev/null 2>&1 \
    | tee "$WORK/logs/$name.log" \
    | while IFS= read -r line; do
        printf '%s\n' "$line"
        case $line in "## "*) printf '%s\n' "$line" >> "$OUT/summary.txt" ;; esac
      done
  rc=${PIPESTATUS[0]}
  took=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }')
  STAGE_RC=$rc
  case $rc in
    0) note "=== $name: ok after $took s" ;;
    124 | 137) note "=== $name: TIMED OUT at its ${budget} s budget (after $took s)" ;;
    *) note "=== $name: FAILED (exit $rc) after $took s" ;;
  esac
  pack
  return 0
}

stop() {  # stop MESSAGE: one clear line, the results so far, exit 2
  note "STOP: $*"
  pack
  finish
  exit 2
}

finish() {
  note "=== done at $(elapsed) s; files in $OUT:"
  (cd "$OUT" && ls -l) | tee -a "$OUT/summary.txt"
  local count
  count=$(find "$OUT" -type f | wc -l)
  [ "$count" -le 8 ] || note "WARNING: $count files in $OUT; the device returns 8"
}

install_stage() {  # install the checkout (and carried wheels) offline; see the scripts' headers
  local wheels=()
  compgen -G ".whl/*.whl" > /dev/null && wheels=(.whl/*.whl)
  if [ ${#wheels[@]} -gt 0 ]; then
    run_stage install_wheels 15 "$PY" -m pip install -q --no-index --no-deps --no-cache-dir \
      --no-build-isolation "${wheels[@]}"
  fi
  run_stage install 30 "$PY" -m pip install -q --no-index --no-deps --no-cache-dir \
    --no-build-isolation -e .
  if [ "$STAGE_RC" != 0 ]; then  # e.g. a setuptools too old for editable installs (< 64)
    note "the editable install failed: importing the checkout through links instead"
    link_checkout
    run_stage install_check 15 "$PY" -c \
      "import pagesim, pagesim.simulator, pagesim.calibration.kernel; print('## links:', pagesim.__file__)"
    [ "$STAGE_RC" = 0 ] || stop "neither the offline install nor links to the checkout import pagesim"
  fi
}

link_checkout() {  # $WORK/site/pagesim mirrors pyproject's package-dir mapping with symlinks
  local site="$WORK/site/pagesim" dir f
  mkdir -p "$site"
  for f in pagesim/*.py; do ln -sf "$PWD/$f" "$site/"; done
  for dir in simulator calibration reports scenarios kernels; do ln -sfn "$PWD/$dir" "$site/$dir"; done
  # PYTHONSAFEPATH: the checkout's own pagesim/ (cli only) must not shadow the links
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1
}

gpu_name() {  # a slug of the GPU's name from the preflight's nvidia-smi line ("h200"), or "gpu"
  local name
  name=$(printf '%s\n' "$SMI_LINE" | head -1 | cut -d, -f1 | tr '[:upper:]' '[:lower:]' \
    | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
  case $name in "" | *failed* | *timed*) name=gpu ;; esac
  printf '%s\n' "$name"
}

preflight_stage() {  # preflight_stage NEED_SIMPY MIN_FREE_GIB
  local smi t0
  t0=$(elapsed)
  smi=$(timeout -k 1 "$(scaled 5)" nvidia-smi \
    --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm \
    --format=csv,noheader 2>&1) || smi="nvidia-smi failed or timed out: ${smi:-no output}"
  SMI_LINE=$smi
  note "## nvidia-smi (at $t0 s, budget 6 s): $smi"
  run_stage preflight 30 "$PY" -c \
    "from pagesim.calibration.gpu_stages import preflight; preflight($1, $2)"
  cp -f "$WORK/logs/preflight.log" "$OUT/preflight.txt"
  if [ "$STAGE_RC" != 0 ]; then
    local why
    why=$(grep -h "PREFLIGHT FAILED" "$WORK/logs/preflight.log" | tail -1 | sed 's/^## //')
    stop "${why:-preflight failed (exit $STAGE_RC)}: nothing else was run"
  fi
}
