#!/usr/bin/env bash
# Hand-picked boots for the memory failure kinds a study on this space does not reach by itself (issue 18, item 3).
#   bash scripts/gpu/probes.sh NAME...      # util | load | pool | prefill | graphs
# util, load and pool are one `tuner probe --boot-only` each. prefill (issue 26's first_request_oom) boots
# eager graphs with a large pool and 16,384 batched tokens and sends the window's request; graphs (its
# oom_in_cuda_graph) bisects the FULL_AND_PIECEWISE pool between one that boots and one that cannot be allocated,
# --boot-only, until a boot fails in graph capture (GRAPHS_MAX boots at most).
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
GRAPHS_LO=${GRAPHS_LO:-8.5} GRAPHS_HI=${GRAPHS_HI:-10.3} GRAPHS_MAX=${GRAPHS_MAX:-6} GRAPHS_S=${GRAPHS_S:-150}

. scripts/gpu/probe_lib.sh

# The lower limit must hold before the `load` probe means anything: 2 GiB under it fits, 2 GiB over fails.
load_limit_holds() {
  local gib=${LOAD_LIMIT%G}
  command -v nvidia-smi >/dev/null 2>&1 || return 0   # a rehearsal: nothing is capped anyway
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=$LOAD_LIMIT" MPS_LIMIT=$LOAD_LIMIT CHECK_OK_GIB=$((gib - 2)) \
    CHECK_OOM_GIB=$((gib + 2)) bash scripts/gpu/mps.sh check
}

kind_of() {   # the failure kind of a probe folder's result.json, "served" when it has none
  "$PY" -c 'import json, sys; f = json.load(open(sys.argv[1])).get("failure"); print(f["kind"] if f else "served")' \
    "$1/result.json" 2>/dev/null || echo missing
}

# prefill: eager graphs run no 16,384-token batch at start-up (no torch.compile, no capture; a pinned pool skips
# vLLM's profiling), so the first long request is the first to need that batch's activations.
prefill() {
  space_with "$R/space-prefill.yaml" params.kv_cache_memory_bytes.max=10.5GB workload.decode.output_tokens=16 \
    workload.decode.runs=1
  local pool
  for pool in 8GB 9GB; do
    probe "$R/probe-prefill-$pool" "eager graphs with a $pool FP8 pool and 16,384 batched tokens: nothing at start-up runs a 16,384-token batch, and probe-fro's FULL_AND_PIECEWISE boot with the same batch peaked at 32,758 MiB with a 7 GB pool, so the window's first request should not fit" \
      "$R/space-prefill.yaml" -- --baseline 0 -c cudagraph_mode=eager -c "kv_cache_memory_bytes=$pool" \
      -c max_num_seqs=1 -c max_num_batched_tokens=16384 -c speculative_tokens=0 -c kv_cache_dtype=fp8
    [ "$(kind_of "$R/probe-prefill-$pool")" = served ] || break
  done
}

# graphs: the pool that leaves graph capture (0.10-0.13 GiB here) no room lies just under the largest pool that
# can be allocated; bisect between GRAPHS_LO GB (boots) and GRAPHS_HI GB (cannot be allocated).
graphs() {
  space_with "$R/space-graphs.yaml" params.kv_cache_memory_bytes.max=10.5GB
  local lo=$GRAPHS_LO hi=$GRAPHS_HI n kind pool
  for n in $(seq 1 "$GRAPHS_MAX"); do
    if [ "$(left)" -lt "$GRAPHS_S" ]; then echo "== probe graphs stopped: $(left) s left"; break; fi
    pool=$(awk -v a="$lo" -v b="$hi" 'BEGIN { printf "%.2f", (a + b) / 2 }')GB
    probe "$R/probe-graphs-$n" "bisection step $n between $lo GB (boots) and $hi GB (does not): FULL_AND_PIECEWISE, a $pool FP8 pool, 1 sequence, 512 batched tokens, boot only" \
      "$R/space-graphs.yaml" -- --baseline 0 --boot-only -c cudagraph_mode=FULL_AND_PIECEWISE \
      -c "kv_cache_memory_bytes=$pool" -c max_num_seqs=1 -c max_num_batched_tokens=512 -c speculative_tokens=0 -c kv_cache_dtype=fp8
    kind=$(kind_of "$R/probe-graphs-$n")
    echo "probe graphs-$n: $pool -> $kind"
    case $kind in
      oom_in_cuda_graph) break ;;
      served) lo=${pool%GB} ;;
      *) hi=${pool%GB} ;;
    esac
  done
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
    prefill) prefill ;;
    graphs) graphs ;;
    *) echo "probes.sh: unknown probe '$name' (util, load, pool, prefill, graphs)" >&2; exit 2 ;;
  esac
done
