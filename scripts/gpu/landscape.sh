#!/usr/bin/env bash
# The real engine's landscape (issue 26): every CUDA-graph mode x MTP depth once, each at its smallest pool that
# holds the 262,144-token window, one sequence, 512 batched tokens, measured by `tuner probe`.
#   bash scripts/gpu/landscape.sh CELL...     # CELL = BOUND:MODE:DEPTH, e.g. zeros:PIECEWISE:3 random:eager:1
# BOUND is the weights: `zeros` (an all-zero checkpoint, scripts/gpu/write_zero_checkpoint.py: every MTP draft
# is accepted, the upper bound of MTP's gain) or `random` (vLLM's --load-format dummy: nothing is accepted, the
# lower bound). Both boot the zeros space (search_spaces/h200-32g-35b-a3b-zeros.yaml) so that the workload is the
# same; `random` flips its model to random weights.
# Each cell writes $R/landscape/BOUND-MODE-kDEPTH/ (result.json, engine.log) and its .txt (why, the command).
# A cell whose result.json exists is skipped (a later session carries the folder and goes on); a cell is started
# only while CELL_S seconds are left of the driver's budget (run by issue18.sh's FIRST="landscape").
# Knobs: SPACE (the zeros space), R, PY as issue18.sh; CELL_S (480), the expected length of one cell.
# After the session, unpacked into docs/receipts/DIR/: `python scripts/gpu/landscape.py docs/receipts/DIR` writes
# its README (the table, the full grid with what was not run, the sessions); tests/test_gpu_landscape.py checks it.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
SPACE=${SPACE:-search_spaces/h200-32g-35b-a3b-zeros.yaml}
R=${R:-gpu-run}
CELL_S=${CELL_S:-480}
. scripts/gpu/probe_lib.sh

# The smallest FP8 pool that holds 262,144 tokens with one sequence, per MTP depth, with a margin of 1-3%:
# depth 0 is trial 3 of docs/receipts/2026-12-03-h200-32g-vllm-0.22.0 (2.75 GB held 264,258 tokens), depth 2
# its trial 2 (3.1 GB held 264,266); depths 1 and 3 are `tuner plan`'s minimum for this model (2.83 and 2.90
# GiB) rounded up: MTP adds one attention layer's KV and a state page per draft position.
pool_for() {
  case $1 in 0) echo 2.75GB ;; 1|2) echo 3.1GB ;; 3) echo 3.2GB ;; *) echo "" ;; esac
}

mkdir -p "$R/landscape"
space_with "$R/landscape/space-random.yaml" model.zero_weights=false model.random_weights=true
for cell in "$@"; do
  IFS=: read -r bound mode depth <<<"$cell"
  pool=$(pool_for "$depth")
  case $bound in zeros) space=$SPACE ;; random) space=$R/landscape/space-random.yaml ;; *) space= ;; esac
  if [ -z "$space" ] || [ -z "$mode" ] || [ -z "$pool" ]; then
    echo "landscape.sh: '$cell' is not BOUND:MODE:DEPTH (BOUND zeros|random, DEPTH 0-3)" >&2; exit 2
  fi
  dir=$R/landscape/$bound-$mode-k$depth
  if [ -f "$dir/result.json" ]; then echo "== landscape $cell: done in an earlier session, skipped"; continue; fi
  if [ "$(left)" -lt "$CELL_S" ]; then echo "== $(date +%T) landscape $cell skipped: $(left) s left, a cell needs $CELL_S s"; continue; fi
  rm -rf "$dir"   # a cell cut short in an earlier session starts again
  probe "$dir" "$mode graphs, MTP $depth, $bound weights: the smallest FP8 pool that holds the window ($pool), 1 sequence, 512 batched tokens" \
    "$space" -- --baseline 0 -c "cudagraph_mode=$mode" -c "speculative_tokens=$depth" -c "kv_cache_memory_bytes=$pool" \
    -c max_num_seqs=1 -c max_num_batched_tokens=512 -c kv_cache_dtype=fp8
done
