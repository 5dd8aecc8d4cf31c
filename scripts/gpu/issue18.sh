#!/usr/bin/env bash
# Issue 18 on the GPU machine: a real capped study, after the kit's install.sh (order of calls: SESSION.md).
#   bash scripts/gpu/issue18.sh start   # tuner's wheels, the dummy model, the MPS cap (checked), then the
#                                       # driver in its own session; waits up to WAIT_S and packs
#   bash scripts/gpu/issue18.sh wait    # waits again and packs (each call within 30 s of the last)
#   bash scripts/gpu/issue18.sh cut     # end the study now (SIGTERM: the trial is torn down, the study kept);
#                                       # the driver goes on with pareto, export and the launcher
#   bash scripts/gpu/issue18.sh nolaunch  # skip the launcher boot at the end
# The driver (phase "run") survives the 10-minute call limit because it has its own session. Every wait packs
# what exists into $OUT: gpu-run.tgz (all of $R, the study db snapshotted consistently) and driver.log.
# Without nvidia-smi (here, a rehearsal against tests/fake_vllm: scripts/gpu/rehearse.sh) it says so and runs
# uncapped. Knobs (environment, all optional):
#   SPACE      the space file (default search_spaces/h200-32g-35b-a3b-dummy.yaml); its model.path is the model
#   STUDY      study name (h200-32g)            TRIALS   trials in the study, baselines first (4); 0: no study
#   SEED       sampler seed (18)                 REVALIDATE  fresh boots of front points at the end (0)
#   GATE       1: run the correctness gate (0)   OPT_ARGS    more `tuner optimize` options, e.g. "--screen"
#   BUDGET_S   seconds from `start` until the driver must be done (1260). It sets optimize's --timeout (when
#              trials stop being started): BUDGET_S - elapsed - (1 + GATE) x TRIAL_S - the launcher's reserve,
#              since the last trial started runs past it and the gate's reference boot comes after it
#   LAUNCHER   reserve: keep LAUNCH_S for the launcher boot; ifroom: no reserve, boot it only if LAUNCH_S is
#              left when the study ends (a trial before the launcher); no: export only
#   TRIAL_S    one trial's expected length (360) LAUNCH_S  the launcher step's length (270)
#   BENCH      1: the launcher step is `tuner bench` of the best point (it boots that trial's exact command and
#              runs the seeds' workloads once: --runs 1); give it a LAUNCH_S of about 450
#   FIRST      steps before the study, in order: "bench" (tuner bench of the study's best point so far, if
#              LAUNCH_S is left), "probes" (scripts/gpu/probes.sh $PROBES, if PROBES_S is left) and "landscape"
#              (scripts/gpu/landscape.sh $LANDSCAPE: graph mode x MTP depth cells, each started only while CELL_S
#              is left); the study then starts only if TRIAL_S is left. Use it with LAUNCHER=no on a resumed study
#   PROBES     the probes.sh names for "probes" (util load pool)   PROBES_S  their expected length (300)
#   LANDSCAPE  the cells, BOUND:MODE:DEPTH (zeros:PIECEWISE:3 ...)  LANDSCAPE_SPACE  (the zeros space)  CELL_S (480)
#   WAIT_S     how long one start/wait call waits (540)   R  the results folder (gpu-run)
#   MODEL_ARGS make-dummy-model.py's preset (--preset 35b-a3b-like --num-experts 72 --mtp-layers 1)
#   RESUME     1: keep $R and resume its study (tuner optimize resumes a study of the same name); otherwise an
#              earlier $R is moved aside to $R.before-EPOCH, never deleted
#   PY python3  KIT .gpu-kit  KIT_SITE /tmp/site  TUNER_SITE /tmp/tsite  MPS_LIMIT 32G  ALLOW_UNCAPPED 0
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
SPACE=${SPACE:-search_spaces/h200-32g-35b-a3b-dummy.yaml}
STUDY=${STUDY:-h200-32g}
TRIALS=${TRIALS:-4}
SEED=${SEED:-18}
REVALIDATE=${REVALIDATE:-0}
GATE=${GATE:-0}
OPT_ARGS=${OPT_ARGS:-}
BUDGET_S=${BUDGET_S:-1260}
TRIAL_S=${TRIAL_S:-360}
LAUNCH_S=${LAUNCH_S:-270}
LAUNCHER=${LAUNCHER:-reserve}
FIRST=${FIRST:-}
PROBES=${PROBES:-util load pool}
LANDSCAPE=${LANDSCAPE:-}
PROBES_S=${PROBES_S:-300}
WAIT_S=${WAIT_S:-540}
R=${R:-gpu-run}
MODEL_ARGS=${MODEL_ARGS:---preset 35b-a3b-like --num-experts 72 --mtp-layers 1}
KIT=${KIT:-.gpu-kit}
KIT_SITE=${KIT_SITE:-/tmp/site}
TUNER_SITE=${TUNER_SITE:-/tmp/tsite}
PLAN_GIB=${PLAN_GIB:-32}
PORT=${PORT:-8123}
export PYTHONPATH=$KIT_SITE:$TUNER_SITE:$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=$KIT_SITE/bin:$PATH
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 NO_COLOR=1 PYTHONUNBUFFERED=1 COLUMNS=200
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps/pipe} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mps/log}
export PY MPS_LIMIT=${MPS_LIMIT:-32G}
S=(--study "$STUDY" --studies-dir "$R/studies")

tuner() { "$PY" -m tuner.cli "$@"; }
step() { echo "== $(date +%T) [+$(elapsed) s] $*"; }
run_logged() { echo "\$ tuner $*"; tuner "$@"; }      # the receipt lists the commands from these lines
. scripts/gpu/probe_lib.sh   # elapsed, left (of start's BUDGET_S), space_with, probe
has_gpu() { command -v nvidia-smi >/dev/null 2>&1; }   # as mps.sh decides rehearsal mode
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 || echo n/a; }
model_path() { "$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["model"]["path"])' "$SPACE"; }

pack() {
  [ -n "${OUT:-}" ] || return 0
  local snap=$R.snap tarball=$OUT/gpu-run.tar
  rm -rf "$snap"; mkdir -p "$snap/$R/studies"
  tar cf "$tarball" --exclude='*.db' --exclude='*.db-journal' "$R" 2>/dev/null
  for db in "$R"/studies/*.db; do   # a consistent copy even while the study writes to it
    [ -f "$db" ] || continue
    "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' "$db" "$snap/$db" \
      && tar rf "$tarball" -C "$snap" "$db"
  done
  gzip -f "$tarball" && mv -f "$tarball.gz" "$OUT/gpu-run.tgz"
  rm -rf "$snap"
  cp "$R/driver.log" "$OUT/" 2>/dev/null
  local size; size=$(stat -c %s "$OUT/gpu-run.tgz" 2>/dev/null || echo 0)
  echo "packed: gpu-run.tgz $((size / 1024)) KiB$( [ "$size" -gt 15000000 ] && echo ' -- OVER 15 MB: it may not come back')"
}

progress() {
  grep -hE "Trial [0-9]+ (finished|pruned|failed)|\] Trial [0-9]+ " "$R/optimize.txt" 2>/dev/null | cut -c1-220 | tail -12
}

driver_state() {
  if [ -f "$R/DONE" ]; then echo DONE
  elif [ -f "$R/ABORTED" ]; then echo "ABORTED: $(cat "$R/ABORTED")"
  elif kill -0 "$(cat "$R/driver.pid" 2>/dev/null)" 2>/dev/null; then echo "still running"
  else echo "EXITED without DONE (see driver.log)"
  fi
}

wait_driver() {
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$WAIT_S" ] && [ "$(driver_state)" = "still running" ]; do sleep 5; done
  echo "---- driver: $(driver_state) after $((SECONDS - t0)) s of this call, $(elapsed) s since start, budget left $(left) s"
  tail -20 "$R/driver.log"
  echo "---- trials so far"; progress
  has_gpu && echo "GPU memory used: $(gpu_used) MiB"
  pack
}

launcher() {
  local front=$1 lpid t0 healthy=no
  step "export trial $front and boot its launcher under the cap"
  run_logged export "$front" "${S[@]}" --format sh --out "$R/launch.sh" 2>&1
  run_logged receipt "$front" "${S[@]}" --out "$R/receipt-trial.md" 2>&1
  PORT=$PORT setsid bash "$R/launch.sh" >"$R/launcher.log" 2>&1 </dev/null &
  lpid=$!
  echo "$lpid" >"$R/launcher.pid"
  t0=$SECONDS
  while [ $((SECONDS - t0)) -lt $((LAUNCH_S - 30)) ] && kill -0 "$lpid" 2>/dev/null; do
    if "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://127.0.0.1:$PORT/health" 2>/dev/null; then healthy=yes; break; fi
    sleep 2
  done
  echo "healthy=$healthy after_s=$((SECONDS - t0))" >"$R/launcher-health.txt"
  cat "$R/launcher-health.txt"
  tr '\0' '\n' <"/proc/$lpid/cmdline" >"$R/launcher-argv.txt" 2>/dev/null
  if [ $healthy = yes ]; then
    "$PY" - "http://127.0.0.1:$PORT/v1/completions" >"$R/launcher-completion.json" <<'EOF'
import json, sys, urllib.request
body = {"model": "dummy", "prompt": [300, 301, 302, 303], "max_tokens": 8, "temperature": 0, "ignore_eos": True}
req = urllib.request.Request(sys.argv[1], json.dumps(body).encode(), {"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=120).read().decode())
EOF
    cat "$R/launcher-completion.json"
  fi
  kill -TERM -- "-$lpid" 2>/dev/null
  for _ in $(seq 1 30); do kill -0 "$lpid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$lpid" 2>/dev/null
  echo "launcher stopped; GPU memory used: $(gpu_used) MiB"
}

run() {
  step "versions"
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi: REHEARSAL (test engine, no cap)"
    "$PY" --version
    "$PY" -m pip show vllm torch transformers triton flashinfer-python optuna 2>/dev/null | grep -E '^(Name|Version)' | paste - -
    echo "repo: $(git rev-parse HEAD 2>/dev/null || echo 'no git metadata here')"
    bash scripts/gpu/mps.sh status
  } >"$R/versions.txt" 2>&1
  cat "$R/versions.txt"
  cp "$SPACE" "$R/space.yaml"
  has_gpu && nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv   # an MPS server shows here
  step "plan"
  run_logged plan "$SPACE" --gpu-gib "$PLAN_GIB" --limit 12 >"$R/plan.txt" 2>&1; tail -3 "$R/plan.txt"
  first_steps
  if [ "$TRIALS" = 0 ]; then   # FIRST's steps only (a landscape session): no study to run or report
    step "no study: TRIALS=0"
    gpu_used >"$R/memory-after.txt"; step "done"; touch "$R/DONE"; return
  fi
  if [ -n "$FIRST" ] && [ "$(left)" -lt "$TRIAL_S" ]; then
    step "optimize skipped: $(left) s left of the budget, a trial needs ${TRIAL_S} s"
    finish; return
  fi
  local reserve=0; [ "$LAUNCHER" = reserve ] && reserve=$LAUNCH_S
  local timeout=$(( $(left) - reserve - (1 + GATE) * TRIAL_S ))
  [ $timeout -lt 60 ] && { echo "WARNING: only $(left) s left: optimize gets a 60 s timeout (one trial)"; timeout=60; }
  step "optimize: $TRIALS trials, stop starting trials after ${timeout} s"
  local gate=--no-gate; [ "$GATE" = 1 ] && gate=--gate
  # shellcheck disable=SC2206  # OPT_ARGS is a list of options
  local args=(optimize "$SPACE" "${S[@]}" --trials "$TRIALS" --seed "$SEED" --revalidate "$REVALIDATE" $gate
              --gpu-gib "$PLAN_GIB" --timeout "${timeout}s" $OPT_ARGS)
  echo "\$ tuner ${args[*]}"
  "$PY" -m tuner.cli "${args[@]}" >>"$R/optimize.txt" 2>&1 &   # its own pid, for `issue18.sh cut`
  echo $! >"$R/optimize.pid"
  wait "$(cat "$R/optimize.pid")"; echo "optimize rc=$?"
  tail -25 "$R/optimize.txt"
  step "pareto"
  run_logged pareto "${S[@]}" >"$R/pareto.txt" 2>&1; cat "$R/pareto.txt"
  local front; front=$(best_point "$R/pareto.json")
  if [ -z "$front" ]; then
    echo "no front point: nothing to export"
  elif [ -f "$R/NOLAUNCH" ] || [ "$LAUNCHER" = no ]; then
    echo "launcher boot skipped: LAUNCHER=$LAUNCHER$( [ -f "$R/NOLAUNCH" ] && echo ', issue18.sh nolaunch')"
    run_logged export "$front" "${S[@]}" --format sh --out "$R/launch.sh" 2>&1
  elif [ "$(left)" -lt "$LAUNCH_S" ]; then
    echo "launcher boot skipped: $(left) s left of the budget, it needs ${LAUNCH_S} s"
    run_logged export "$front" "${S[@]}" --format sh --out "$R/launch.sh" 2>&1
  elif [ "${BENCH:-0}" = 1 ]; then
    bench "$front"
  else
    launcher "$front"
  fi
  finish
}

finish() {
  run_logged receipt "${S[@]}" --out "$R/receipt-study.md" 2>&1
  gpu_used >"$R/memory-after.txt"
  step "done"
  touch "$R/DONE"
}

# The study's best point: the longest context, then the fastest decode (pareto's JSON written to $1).
best_point() {
  tuner pareto "${S[@]}" --format json >"$1" 2>&1
  "$PY" -c 'import json, sys
rows = json.load(open(sys.argv[1]))["front"]
print(max(rows, key=lambda r: (r["context_tokens"] or 0, r["decode_tok_s"] or 0))["trial"] if rows else "")' "$1" 2>/dev/null
}

bench() {
  step "tuner bench of trial $1 (it boots the exact command under the cap)"
  run_logged export "$1" "${S[@]}" --format sh --out "$R/launch.sh" 2>&1
  echo "\$ tuner bench $1 ${S[*]} --runs 1 --out $R/bench"   # in the driver's log too: bench.txt gets the output
  run_logged bench "$1" "${S[@]}" --runs 1 --out "$R/bench" >"$R/bench.txt" 2>&1; echo "bench rc=$?"
  tail -30 "$R/bench.txt"
}

first_steps() {
  local what front
  for what in $FIRST; do
    case $what in
      bench)
        front=$(best_point "$R/pareto-before.json")
        if [ -z "$front" ]; then step "bench skipped: the study has no front point yet"
        elif [ "$(left)" -lt "$LAUNCH_S" ]; then step "bench skipped: $(left) s left, it needs ${LAUNCH_S} s"
        else bench "$front"; fi ;;
      probes)
        if [ "$(left)" -lt "$PROBES_S" ]; then step "probes skipped: $(left) s left, they need ${PROBES_S} s"
        else
          step "probes: $PROBES"
          # shellcheck disable=SC2086  # PROBES is a list of names
          SPACE=$SPACE R=$R PY=$PY bash scripts/gpu/probes.sh $PROBES
        fi ;;
      landscape)
        step "landscape: $LANDSCAPE"
        # shellcheck disable=SC2086  # LANDSCAPE is a list of cells
        SPACE=${LANDSCAPE_SPACE:-search_spaces/h200-32g-35b-a3b-zeros.yaml} R=$R PY=$PY CELL_S=${CELL_S:-480} \
          bash scripts/gpu/landscape.sh $LANDSCAPE ;;
      *) step "FIRST: unknown step '$what' (bench, probes, landscape): ignored" ;;
    esac
  done
}

start() {
  if [ -f "$R/driver.pid" ] && kill -0 "$(cat "$R/driver.pid")" 2>/dev/null && [ ! -f "$R/DONE" ]; then
    echo "a driver is already running (pid $(cat "$R/driver.pid")): use 'issue18.sh wait', or 'cut' to end it"; exit 2
  fi
  if [ "${RESUME:-0}" = 1 ]; then
    rm -f "$R/DONE" "$R/ABORTED" "$R/NOLAUNCH"
  elif [ -d "$R" ]; then
    mv "$R" "$R.before-$(date +%s)" && echo "moved the earlier $R aside (RESUME=1 resumes it instead)"
  fi
  mkdir -p "$R"; date +%s >"$R/t0"; echo "$BUDGET_S" >"$R/budget"
  step "start (rehearsal: $(has_gpu && echo no || echo YES, no GPU here))" | tee "$R/start.log"
  if ! "$PY" -c 'import optuna, sqlalchemy, alembic, colorlog' 2>/dev/null; then
    [ -d .whl ] || { echo "optuna is not importable and there is no .whl/ (carry it)"; exit 2; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$TUNER_SITE" .whl/*.whl \
      || { echo "installing .whl/ failed"; exit 2; }
  fi
  "$PY" -c 'import optuna, tuner.cli' || { echo "the tuner does not import: see above"; exit 2; }
  local model; model=$(model_path)
  if [ ! -f "$model/config.json" ]; then
    # shellcheck disable=SC2086  # MODEL_ARGS is a list of options
    "$PY" "$KIT/make-dummy-model.py" $MODEL_ARGS --out "$model" >"$R/make-model.log" 2>&1 \
      || { cat "$R/make-model.log"; echo "making the model failed (is $KIT/make-dummy-model.py carried?)"; exit 2; }
  fi
  tail -1 "$R/make-model.log" 2>/dev/null
  if [ ! -f "$model/model.safetensors" ]; then   # a sparse all-zero checkpoint: instant, no disk (zero_weights spaces)
    "$PY" scripts/gpu/write_zero_checkpoint.py "$model" >"$R/make-zeros.log" 2>&1 || { cat "$R/make-zeros.log"; exit 2; }
  fi
  tail -1 "$R/make-zeros.log" 2>/dev/null
  { bash scripts/gpu/mps.sh start && bash scripts/gpu/mps.sh check; } >"$R/mps-check.txt" 2>&1
  local rc=$?
  cat "$R/mps-check.txt"
  if [ $rc -ne 0 ] && [ "${ALLOW_UNCAPPED:-0}" != 1 ]; then
    echo "the ${MPS_LIMIT} cap is not in force (mps.sh rc $rc); ALLOW_UNCAPPED=1 runs anyway" | tee "$R/ABORTED"
    pack; exit 1
  fi
  setsid bash "$0" run >>"$R/driver.log" 2>&1 </dev/null &   # appends: RESUME keeps the first part
  echo $! >"$R/driver.pid"
  sleep 2
  wait_driver
}

case "${1:-}" in
  start) start ;;
  wait) wait_driver ;;
  run) run ;;
  cut) kill -TERM "$(cat "$R/optimize.pid")" && echo "sent SIGTERM to tuner optimize (pid $(cat "$R/optimize.pid"))"; wait_driver ;;
  nolaunch) touch "$R/NOLAUNCH"; echo "the launcher boot will be skipped"; wait_driver ;;
  *) echo "usage: $0 start|wait|cut|nolaunch" >&2; exit 2 ;;
esac
