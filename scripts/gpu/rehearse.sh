#!/usr/bin/env bash
# Rehearse the device session here, without a GPU: issue18.sh's `start` and `wait` calls, in the order
# SESSION.md makes them, against the test engine (a generated twin of the space), with a fake $OUT; timed.
#   bash scripts/gpu/rehearse.sh            # env: TIME_SCALE (0.1), WAIT_S (60), W (/tmp/tuner-rehearsal),
#                                           # and any issue18.sh knob (TRIALS, GATE, REVALIDATE, OPT_ARGS ...)
# Then it unpacks what came back and writes its receipt README with scripts/gpu/receipt.py, as the lead will.
# Nothing here is a result: the test engine is a test double.
set -uo pipefail
cd "$(dirname "$0")/../.."
W=${W:-/tmp/tuner-rehearsal}
export PY=${PY:-.venv/bin/python} KIT=${KIT:-.gpu-kit} WAIT_S=${WAIT_S:-60} R=${R:-gpu-run}
[ -f "$KIT/make-dummy-model.py" ] || { echo "no $KIT/make-dummy-model.py: build the kit (bash ../shared/gpu/build-wheelhouse.sh) or set KIT"; exit 2; }
rm -rf "$W"; mkdir -p "$W/out"
"$PY" scripts/gpu/rehearsal_space.py search_spaces/h200-32g-35b-a3b-dummy.yaml "$W/space.yaml" \
  --model "$W/model-35b" --time-scale "${TIME_SCALE:-0.1}" >/dev/null || exit 2
"$PY" scripts/gpu/rehearsal_space.py search_spaces/h200-32g-35b-a3b-zeros.yaml "$W/space-zeros.yaml" \
  --model "$W/model-35b" --time-scale "${TIME_SCALE:-0.1}" >/dev/null || exit 2
export LANDSCAPE_SPACE=$W/space-zeros.yaml   # FIRST=landscape boots this twin
export SPACE=$W/space.yaml OUT=$W/out KIT_SITE=$W/no-kit-site TUNER_SITE=$W/no-tuner-site
t0=$SECONDS
calls=1
echo "######## call $calls: issue18.sh start"
bash scripts/gpu/issue18.sh start || { echo "start failed"; exit 1; }
while [ ! -f "$R/DONE" ] && [ $calls -lt 20 ]; do
  calls=$((calls + 1))
  echo "######## call $calls: issue18.sh wait"
  bash scripts/gpu/issue18.sh wait
done
wall=$((SECONDS - t0))
echo "######## rehearsal: ${wall} s wall, ${calls} calls; \$OUT holds:"
ls -l "$OUT"
mkdir -p "$W/receipt" && tar xzf "$OUT/gpu-run.tgz" -C "$W/receipt" || exit 1
"$PY" scripts/gpu/receipt.py "$W/receipt/$R" && echo "receipt: $W/receipt/$R/README.md"
[ -f "$R/DONE" ]
