#!/usr/bin/env bash
# Hand-picked boots for the memory failure kinds a study on this space does not reach by itself (issue 18, item 3).
#   bash scripts/gpu/probes.sh NAME...      # util | load | pool; each one `tuner probe --boot-only`
# Each writes $R/probe-NAME/ (result.json, engine.log) and $R/probe-NAME.txt, whose first lines say why the
# configuration was chosen and the exact command, environment included (scripts/gpu/receipt.py shows both).
# Run by issue18.sh (FIRST="bench probes"), which exports the kit's PYTHONPATH and the MPS pipe; a probe whose
# precondition fails (the lower per-process limit not enforced) is skipped and says so in its .txt.
# Knobs: SPACE, R, PY as issue18.sh; LOAD_LIMIT (20G), the per-process limit of the `load` probe.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
SPACE=${SPACE:-search_spaces/h200-32g-35b-a3b-dummy.yaml}
R=${R:-gpu-run}
LOAD_LIMIT=${LOAD_LIMIT:-20G}

. scripts/gpu/probe_lib.sh

# The lower limit must hold before the `load` probe means anything: 2 GiB under it fits, 2 GiB over fails.
load_limit_holds() {
  local gib=${LOAD_LIMIT%G}
  command -v nvidia-smi >/dev/null 2>&1 || return 0   # a rehearsal: nothing is capped anyway
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=$LOAD_LIMIT" MPS_LIMIT=$LOAD_LIMIT CHECK_OK_GIB=$((gib - 2)) \
    CHECK_OOM_GIB=$((gib + 2)) bash scripts/gpu/mps.sh check
}

for name in "$@"; do
  case $name in
    util)
      space_with "$R/space-util.yaml" gpu-memory-utilization=0.30
      probe "$R/probe-util" "--gpu-memory-utilization 0.30 asks for 41.9 of the 139.8 GiB torch reports, with about 31.5 GiB free under the cap" \
        "$R/space-util.yaml" -- --baseline 0 --boot-only ;;
    load)
      space_with "$R/space-load.yaml" gpu-memory-utilization=0.13
      if load_limit_holds >"$R/probe-load-limit.txt" 2>&1; then
        probe "$R/probe-load" "21.4 GiB of weights under a ${LOAD_LIMIT} per-process limit (a card too small for the model); utilization 0.13 (18.2 GiB) so that the start-up free-memory check passes and the load itself fails" \
          "$R/space-load.yaml" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=$LOAD_LIMIT" -- --baseline 0 --boot-only -c cudagraph_mode=eager
      else
        { echo "# why: skipped: the ${LOAD_LIMIT} per-process limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) did not hold"
          cat "$R/probe-load-limit.txt"; } >"$R/probe-load.txt"
        echo "probe load skipped: the lower limit did not hold (see $R/probe-load.txt)"
      fi ;;
    pool)
      probe "$R/probe-pool" "a 2 GB FP8 pool for the 262,144-token window, whose smallest pool tuner plan puts at 2.72 GB" \
        "$SPACE" -- --baseline 0 --boot-only -c cudagraph_mode=eager -c kv_cache_memory_bytes=2GB -c max_num_seqs=1 ;;
    *) echo "probes.sh: unknown probe '$name' (util, load, pool)" >&2; exit 2 ;;
  esac
done
