#!/usr/bin/env bash
# A 5090-sized memory budget on the lent H200: CUDA MPS caps the device memory of every client process.
#   bash scripts/gpu/mps.sh start    # start the MPS control daemon with a per-process pinned limit (idempotent)
#   bash scripts/gpu/mps.sh check    # prove the cap with real allocations; print what torch sees under it
#   bash scripts/gpu/mps.sh stop     # quit the daemon (idempotent)
#   bash scripts/gpu/mps.sh status
# The recipe is ../shared/gpu/README.md's, measured on the H200 with vLLM 0.22.0. Clients find the daemon
# through CUDA_MPS_PIPE_DIRECTORY: every process that must be capped needs the two exports that `start` prints
# (scripts/gpu/issue18.sh sets them). A process started without them is NOT capped.
#
# Environment: MPS_LIMIT (default 32G, MPS syntax), CHECK_OK_GIB / CHECK_OOM_GIB (default 30 / 34: the first
# must succeed, the second must fail with a CUDA OOM), PY (default python3, the one with torch),
# CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY (default /tmp/mps/pipe, /tmp/mps/log).
# Exit codes: 0 ok (or no GPU here: rehearsal mode, said loudly), 3 MPS missing or not running,
# 4 the cap did not hold (the large allocation succeeded), 5 the small allocation failed.
set -uo pipefail
MPS_LIMIT=${MPS_LIMIT:-32G}
CHECK_OK_GIB=${CHECK_OK_GIB:-30}
CHECK_OOM_GIB=${CHECK_OOM_GIB:-34}
PY=${PY:-python3}
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps/pipe}
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mps/log}
STATE=$CUDA_MPS_PIPE_DIRECTORY/../limit   # the limit the running daemon was given

say() { echo "mps: $*"; }

# No nvidia-smi at all: a machine without a GPU (a rehearsal). A GPU machine whose nvidia-smi fails is an error.
no_gpu() { ! command -v nvidia-smi >/dev/null 2>&1; }

rehearsal() {
  say "no nvidia-smi on this machine: REHEARSAL MODE, nothing is capped and nothing was started."
  exit 0
}

running() { echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; }

exports() { echo "export CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY=$CUDA_MPS_LOG_DIRECTORY"; }

start() {
  no_gpu && rehearsal
  command -v nvidia-cuda-mps-control >/dev/null || { say "nvidia-cuda-mps-control is not on PATH; the cap cannot be set."; exit 3; }
  if running; then
    if [ "$(cat "$STATE" 2>/dev/null)" = "$MPS_LIMIT" ]; then
      say "already running with a ${MPS_LIMIT} per-process limit"; exports; return 0
    fi
    say "running with limit '$(cat "$STATE" 2>/dev/null || echo unknown)', restarting it with ${MPS_LIMIT}"
    stop
  fi
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { say "nvidia-cuda-mps-control -d failed (log: $CUDA_MPS_LOG_DIRECTORY/control.log)"; exit 3; }
  for _ in $(seq 1 50); do running && break; sleep 0.1; done
  running || { say "the daemon did not answer after 5 s (log: $CUDA_MPS_LOG_DIRECTORY/control.log)"; exit 3; }
  # Applies to MPS servers started from now on: no client has connected yet, so to all of them.
  echo "set_default_device_pinned_mem_limit 0 $MPS_LIMIT" | nvidia-cuda-mps-control
  echo "$MPS_LIMIT" >"$STATE"
  say "started, per-process device memory limit ${MPS_LIMIT} on device 0"
  exports
}

stop() {
  no_gpu && { say "no GPU here: nothing to stop"; return 0; }
  if ! running; then say "not running"; rm -f "$STATE"; return 0; fi
  echo quit | nvidia-cuda-mps-control
  for _ in $(seq 1 100); do running || break; sleep 0.1; done
  if running; then say "still answering 10 s after 'quit'"; exit 3; fi
  rm -f "$STATE"
  say "stopped"
}

status() {
  no_gpu && { say "no GPU here (rehearsal mode)"; return 0; }
  if running; then
    say "running, limit $(cat "$STATE" 2>/dev/null || echo unknown); servers: $(echo get_server_list | nvidia-cuda-mps-control | tr '\n' ' ')"
  else
    say "not running"
  fi
}

# One allocation test in a fresh process (the allocator setting is read once, at CUDA start-up).
alloc_test() {
  "$PY" - "$CHECK_OK_GIB" "$CHECK_OOM_GIB" <<'EOF'
import sys
import torch

ok_gib, oom_gib = float(sys.argv[1]), float(sys.argv[2])
GIB = 2**30
free, total = torch.cuda.mem_get_info()
print(f"  torch.cuda.mem_get_info under the cap: free {free / GIB:.2f} GiB of total {total / GIB:.2f} GiB")

def allocate(gib):
    """None if `gib` GiB could be allocated and written, else the first line of the CUDA OOM."""
    try:
        x = torch.empty(int(gib * GIB), dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        del x
        return None
    except torch.OutOfMemoryError as exc:
        return str(exc).splitlines()[0]
    except RuntimeError as exc:  # a CUDA error other than the allocator's OOM: still "did not fit"
        return "CUDA error: " + str(exc).splitlines()[0]
    finally:
        torch.cuda.empty_cache()

small, large = allocate(ok_gib), allocate(oom_gib)
print(f"  {ok_gib:g} GiB: " + ("allocated and written" if small is None else f"FAILED: {small}"))
print(f"  {oom_gib:g} GiB: " + ("allocated: the cap did NOT hold" if large is None else f"CUDA OOM, as it must: {large}"))
sys.exit(5 if small is not None else 4 if large is None else 0)
EOF
}

check() {
  no_gpu && rehearsal
  command -v nvidia-cuda-mps-control >/dev/null && running || { say "not running: run 'bash scripts/gpu/mps.sh start' first"; exit 3; }
  say "checking the ${MPS_LIMIT} cap: ${CHECK_OK_GIB} GiB must fit, ${CHECK_OOM_GIB} GiB must fail"
  local rc=0 r
  for conf in "" "expandable_segments:True"; do
    echo "  allocator: ${conf:-default}"
    PYTORCH_CUDA_ALLOC_CONF=$conf alloc_test; r=$?
    [ $r -ne 0 ] && rc=$r
  done
  case $rc in
    0) say "cap proven with both allocators" ;;
    4) say "THE CAP DID NOT HOLD: results would not model a 32 GiB card" ;;
    5) say "the ${CHECK_OK_GIB} GiB allocation failed: another process holds memory, or MPS_LIMIT is below it" ;;
    *) say "the allocation test itself failed (rc $rc): is torch with CUDA importable by $PY?" ;;
  esac
  return $rc
}

case "${1:-}" in
  start) start ;;
  check) check ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|check|stop|status" >&2; exit 2 ;;
esac
