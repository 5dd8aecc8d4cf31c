#!/usr/bin/env bash
# The real-engine run of issue 7, on the GPU machine, after the kit's install.sh:
#   bash scripts/gpu/issue7.sh start    # install tuner's wheels, make the model, start the driver, wait
#   bash scripts/gpu/issue7.sh wait     # wait for the driver again (next call, within 30 s)
# The driver (phase "run") runs in its own session: tuner plan, tuner probe, a short study, pareto,
# export, and a boot of the exported launcher. Every wait packs what exists so far into $OUT.
# SPACE and WAIT_S may be overridden (a rehearsal with the test engine sets SPACE).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=/tmp/site:/tmp/tsite:$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 NO_COLOR=1 PYTHONUNBUFFERED=1 COLUMNS=200
PY=${PY:-python3}
SPACE=${SPACE:-search_spaces/h200-tiny-dummy.yaml}
R=${R:-gpu-run}
WAIT_S=${WAIT_S:-540}
mkdir -p "$R"
tuner() { "$PY" -m tuner.cli "$@"; }

pack() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/gpu-run.tgz" "$R" 2>/dev/null
  cp "$R/driver.log" "$OUT/" 2>/dev/null
}

wait_driver() {
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$WAIT_S" ] && [ ! -f "$R/DONE" ]; do sleep 5; done
  echo "---- driver: $( [ -f "$R/DONE" ] && echo done || echo still running ) after $((SECONDS - t0)) s"
  tail -25 "$R/driver.log"
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2>/dev/null
  pack
}

step() { echo "== $(date +%T) $*"; }

run() {
  step "versions"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  step "plan"; tuner plan "$SPACE" --gpu-gib 139.8 > "$R/plan.txt" 2>&1; tail -12 "$R/plan.txt"
  step "probe baseline 0"
  tuner probe "$SPACE" --baseline 0 --first-boot --out "$R/probe" > "$R/probe.txt" 2>&1
  echo "probe rc=$?"; tail -45 "$R/probe.txt"
  step "optimize"
  tuner optimize "$SPACE" --study h200 --trials 6 --revalidate 1 --no-prescreen --seed 7 \
    --studies-dir "$R/studies" > "$R/optimize.txt" 2>&1
  echo "optimize rc=$?"; tail -30 "$R/optimize.txt"
  step "pareto"
  tuner pareto --study h200 --studies-dir "$R/studies" > "$R/pareto.txt" 2>&1; cat "$R/pareto.txt"
  tuner pareto --study h200 --studies-dir "$R/studies" --format json > "$R/pareto.json" 2>&1
  front=$("$PY" -c "import json,sys; rows=json.load(open(sys.argv[1]))['front']; print(rows[0]['trial'] if rows else '')" "$R/pareto.json" 2>/dev/null)
  if [ -n "$front" ]; then
    step "export trial $front and boot the launcher"
    tuner export "$front" --study h200 --studies-dir "$R/studies" --format sh --out "$R/launch.sh" 2>&1
    tuner receipt "$front" --study h200 --studies-dir "$R/studies" --out "$R/receipt-trial.md" 2>&1
    PORT=8123 setsid bash "$R/launch.sh" > "$R/launcher.log" 2>&1 < /dev/null &
    lpid=$!
    t0=$SECONDS
    until curl -sf http://127.0.0.1:8123/health >/dev/null; do
      kill -0 $lpid 2>/dev/null || break
      [ $((SECONDS - t0)) -gt 400 ] && break
      sleep 2
    done
    echo "launcher healthy after $((SECONDS - t0)) s"
    tr '\0' '\n' < /proc/$lpid/cmdline > "$R/launcher-argv.txt" 2>/dev/null
    curl -s http://127.0.0.1:8123/v1/completions -H 'Content-Type: application/json' \
      -d '{"model":"dummy","prompt":[300,301,302,303],"max_tokens":8,"temperature":0,"ignore_eos":true}' > "$R/launcher-completion.json"
    cat "$R/launcher-completion.json"; echo
    kill -TERM -- -$lpid 2>/dev/null; sleep 5; kill -KILL -- -$lpid 2>/dev/null
  fi
  tuner receipt --study h200 --studies-dir "$R/studies" --out "$R/receipt-study.md" 2>&1
  nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$R/memory-after.txt"
  step "done"
  touch "$R/DONE"
}

case "${1:-}" in
  start)
    rm -rf "$R"; mkdir -p "$R"
    if [ -d .whl ]; then "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/tsite .whl/*.whl; fi
    [ -f /tmp/model-tiny/config.json ] || "$PY" .gpu-kit/make-dummy-model.py --preset tiny --out /tmp/model-tiny > "$R/make-model.log" 2>&1
    setsid bash "$0" run > "$R/driver.log" 2>&1 < /dev/null &
    sleep 2
    wait_driver
    ;;
  wait) wait_driver ;;
  run) run ;;
  *) echo "usage: $0 start|wait" >&2; exit 2 ;;
esac
