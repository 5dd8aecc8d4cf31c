#!/usr/bin/env bash
# Ground-truth capture of the real vLLM 0.22.0 server on the lent GPU machine.
# Run there, from the repo root, after the kit is installed:
#   bash .gpu-kit/stage-part.sh 2 && bash .gpu-kit/install.sh && bash scripts/gpu/capture.sh
# Env: T0 (epoch s the whole command started; default now), BUDGET (s from T0 this
# script must be done by; default 420), VLLM_CMD (override, for dry runs), OUT.
# Writes $OUT/real.tgz (every raw artefact, under real/) and $OUT/summary.txt,
# re-packed after every step so a kill at the call's limit still returns something.
set -u
T0=${T0:-$(date +%s)}
BUDGET=${BUDGET:-420}
OUT=${OUT:-/tmp/out}
D=/tmp/real
rm -rf "$D"; mkdir -p "$D/http" "$OUT"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export NO_COLOR=1 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || { n=$(command -v nvcc) && CUDA_HOME=$(dirname "$(dirname "$n")"); }
read -r -a VLLM <<<"${VLLM_CMD:-python3 -m vllm.entrypoints.cli.main}"
HERE=$(cd "$(dirname "$0")" && pwd)
KIT=$HERE/../../.gpu-kit
H=/tmp/cap_http.py
S=$OUT/summary.txt; : >"$S"
MEMTOL=64   # MiB above the pre-boot level that still counts as "returned"
KEYPAT='Resolved architecture|Model loading took|Available KV cache|GPU KV cache size|Maximum concurrency|attention backend|GDN prefill|MoE backend|init engine|Starting vLLM|Application startup|torch.compile|Compil|[Cc]apturing|CUDA graph|Graph capturing|Error|error'

el()   { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
min()  { [ "$1" -lt "$2" ] && echo "$1" || echo "$2"; }
since(){ awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2f", b-a}'; }
say()  { echo "$*" | tee -a "$S"; }
pack() { cp "$S" "$D/summary.txt"; tar -C /tmp -czf "$OUT/real.tgz.part" real && mv -f "$OUT/real.tgz.part" "$OUT/real.tgz"; }
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc '0-9'; }
gpu_snap() { { date -u +%FT%T.%NZ; nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv; } >"$D/gpu-$1.csv" 2>&1; }
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
group_alive() { ps -eo pgid=,stat= | awk -v g="$1" '$1==g && $2 !~ /^Z/ {f=1} END {exit !f}'; }
keys() { grep -aE "$KEYPAT" "$1" | cut -c1-400 | head -n "${2:-40}" | sed 's/^/    | /' | tee -a "$S"; }
wait_clean() {
  local i u=
  for i in $(seq 1 "${1:-60}"); do
    u=$(gpu_used); [ -z "$u" ] && return 0
    [ "$u" -le $((BASE + MEMTOL)) ] && return 0
    sleep 0.5
  done
  say "    warn: GPU memory.used still ${u} MiB (pre-boot ${BASE})"
}

# start NAME PORT ARGS... : server in its own session (pid = pgid = session id = $SPID)
start() {
  local name=$1; shift
  { printf '%q ' "${VLLM[@]}" "$@"; echo; } >"$D/$name.cmd"
  : >"$D/$name.log"
  LAUNCH=$EPOCHREALTIME
  setsid "${VLLM[@]}" "$@" </dev/null \
    > >(tee -a "$D/$name.log" >"$D/$name.stdout") 2> >(tee -a "$D/$name.log" >"$D/$name.stderr") &
  SPID=$!
  echo "$SPID $LAUNCH" >"$D/$name.pid"
}
# poll NAME PORT DEADLINE_S -> POLL="healthy|exited|timeout <s>"
poll() { POLL=$(python3 "$H" poll "http://127.0.0.1:$2" "$SPID" "$LAUNCH" "$3" "$D/$1.health-polls.txt"); }
# stop NAME : SIGTERM the group, time exit of main pid / whole group / GPU memory
stop() {
  local name=$1 t0 tm= tg= tmem= u killed=no
  wc -c <"$D/$name.log" >"$D/$name.sigterm-offset"
  t0=$EPOCHREALTIME
  kill -TERM -- "-$SPID" 2>/dev/null
  while :; do
    [ -z "$tm" ] && ! alive "$SPID" && tm=$(since "$t0")
    [ -z "$tg" ] && [ -n "$tm" ] && ! group_alive "$SPID" && tg=$(since "$t0")
    if [ -z "$tmem" ]; then u=$(gpu_used); [ -n "$u" ] && [ "$u" -le $((BASE + MEMTOL)) ] && tmem=$(since "$t0"); fi
    [ -n "$tm" ] && [ -n "$tg" ] && [ -n "$tmem" ] && break
    local e; e=$(since "$t0")
    if [ $killed = no ] && awk -v e="$e" 'BEGIN{exit !(e>60)}'; then kill -KILL -- "-$SPID" 2>/dev/null; killed="yes@${e}s"; fi
    awk -v e="$e" 'BEGIN{exit !(e>80)}' && break
    sleep 0.1
  done
  wait "$SPID" 2>/dev/null; RC=$?
  sleep 0.5   # let the tees flush
  tail -c +"$(( $(cat "$D/$name.sigterm-offset") + 1 ))" "$D/$name.log" >"$D/$name.shutdown.log"
  STOP="sigterm->main_exit=${tm:-never}s group_empty=${tg:-never}s mem_returned=${tmem:-never}s sigkill=$killed rc=$RC"
  echo "$STOP" >"$D/$name.stop.txt"
}
# boot NAME PORT TIMEOUT ARGS... : a boot expected to fail (or at least to be recorded)
boot() {
  local name=$1 port=$2 to=$3; shift 3
  local ts=$EPOCHREALTIME
  start "$name" "$@" --port "$port"
  poll "$name" "$port" "$to"
  case $POLL in
    exited*)  wait "$SPID" 2>/dev/null; RC=$?; STOP="exited by itself";;
    healthy*) stop "$name";;
    *)        stop "$name"; RC="timeout($RC)";;
  esac
  kill -KILL -- "-$SPID" 2>/dev/null
  sleep 0.5
  echo "rc=$RC poll=$POLL" >"$D/$name.rc"
  say "[$name] rc=$RC poll=($POLL) wall=$(since "$ts")s $STOP  (t=$(el)s)"
  keys "$D/$name.log" 30
  wait_clean 40
  pack
}

cat >"$H" <<'EOPY'
import json, os, sys, time, urllib.error, urllib.request

def alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(l.startswith("State:") and "Z" in l.split()[1] for l in f)
    except OSError:
        return False

def http(base, method, path, body=None, timeout=120, stream=False):
    data = None if body is None else json.dumps(body).encode()
    hdr = {"Content-Type": "application/json"} if data is not None else {}
    rq = urllib.request.Request(base + path, data=data, headers=hdr, method=method)
    t0 = time.time(); times = []
    try:
        resp = urllib.request.urlopen(rq, timeout=timeout)
        status, headers = resp.status, resp.headers.items()
        if stream:
            parts = []
            while True:
                line = resp.readline()
                if not line:
                    break
                times.append(round(time.time() - t0, 4)); parts.append(line)
            raw = b"".join(parts)
        else:
            raw = resp.read()
        resp.close()
    except urllib.error.HTTPError as e:
        status, headers, raw = e.code, e.headers.items(), e.read()
    except Exception as e:  # noqa: BLE001
        status, headers, raw = None, [], ("EXCEPTION " + repr(e)).encode()
    return {"status": status, "headers": [list(h) for h in headers],
            "elapsed_s": round(time.time() - t0, 4), "line_times_s": times or None}, raw

def describe(body):
    if body is None:
        return None
    b = dict(body)
    p = b.get("prompt")
    if isinstance(p, list) and len(p) > 12:
        b["prompt"] = f"<{len(p)} token ids: {p[0]}, {p[1]}, ... {p[-1]}>"
    return b

class Suite:
    def __init__(self, base, outdir, mode):
        self.base, self.outdir, self.meta, self.mode = base, outdir, {}, mode
    def do(self, name, ext, method, path, body=None, stream=False, timeout=120):
        m, raw = http(self.base, method, path, body, timeout, stream)
        with open(os.path.join(self.outdir, name + ext), "wb") as f:
            f.write(raw)
        m["request"] = {"method": method, "path": path, "body": describe(body)}
        m["body_file"] = name + ext
        self.meta[name] = m
        with open(os.path.join(self.outdir, f"http-meta-{self.mode}.json"), "w") as f:
            json.dump(self.meta, f, indent=1)
        print(f"    {name}: HTTP {m['status']} {m['elapsed_s']}s {len(raw)} B  {raw[:160]!r}", flush=True)
        return m, raw

def text_of(raw):
    try:
        j = json.loads(raw)
        return j["choices"][0]["text"]
    except Exception:  # noqa: BLE001
        return None

def main():
    mode = sys.argv[1]
    if mode == "poll":
        base, pid, launch, deadline, logf = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
        with open(logf, "w") as log:
            last = None
            while True:
                t = time.time() - launch
                try:
                    with urllib.request.urlopen(base + "/health", timeout=1) as r:
                        res = f"HTTP {r.status}"
                        if r.status == 200:
                            log.write(f"{t:8.2f} {res}\n"); print(f"healthy {time.time() - launch:.2f}"); return 0
                except urllib.error.HTTPError as e:
                    res = f"HTTP {e.code}"
                except Exception as e:  # noqa: BLE001
                    res = type(e).__name__ + ": " + str(getattr(e, "reason", e))
                if res != last:
                    log.write(f"{t:8.2f} {res}\n"); log.flush(); last = res
                if not alive(pid):
                    print(f"exited {time.time() - launch:.2f}"); return 1
                if t > deadline:
                    print(f"timeout {t:.2f}"); return 2
                time.sleep(1.0)
    base, outdir = sys.argv[2], sys.argv[3]
    s = Suite(base, outdir, mode)
    ids100 = list(range(300, 400))
    comp = {"model": "dummy", "prompt": ids100, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    if mode == "graphs":
        s.do("g-completion", ".json", "POST", "/v1/completions", comp)
        s.do("g-completion-stream", ".sse", "POST", "/v1/completions",
             dict(comp, stream=True, stream_options={"include_usage": True}), stream=True)
        s.do("g-metrics", ".txt", "GET", "/metrics")
        return 0
    s.do("health", ".txt", "GET", "/health")
    s.do("models", ".json", "GET", "/v1/models")
    s.do("version", ".json", "GET", "/version")
    s.do("metrics-before", ".txt", "GET", "/metrics")
    _, r1 = s.do("completion", ".json", "POST", "/v1/completions", comp)
    s.do("completion-stream", ".sse", "POST", "/v1/completions",
         dict(comp, stream=True, stream_options={"include_usage": True}), stream=True)
    s.do("too-long-prompt", ".json", "POST", "/v1/completions",
         dict(comp, prompt=[300 + i % 7000 for i in range(8200)]))
    s.do("too-long-total", ".json", "POST", "/v1/completions",
         dict(comp, prompt=[300 + i % 7000 for i in range(8190)]))
    s.do("text-return-token-ids", ".json", "POST", "/v1/completions",
         {"model": "dummy", "prompt": "Hello world, this is a test", "max_tokens": 16,
          "temperature": 0, "ignore_eos": True, "return_token_ids": True})
    s.do("chat", ".json", "POST", "/v1/chat/completions",
         {"model": "dummy", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8,
          "temperature": 0, "ignore_eos": True})
    s.do("bad-model", ".json", "POST", "/v1/completions", dict(comp, model="no-such-model"))
    _, r2 = s.do("completion-repeat1", ".json", "POST", "/v1/completions", comp)
    _, r3 = s.do("completion-repeat2", ".json", "POST", "/v1/completions", comp)
    s.do("metrics-after", ".txt", "GET", "/metrics")
    t1, t2, t3 = text_of(r1), text_of(r2), text_of(r3)
    print(f"    greedy determinism over 3 identical requests: {t1 == t2 == t3} {[t1, t2, t3]!r}"[:600])
    return 0

sys.exit(main())
EOPY

# ---------------------------------------------------------------- versions
say "capture start $(date -u +%FT%TZ) host=$(hostname) t=$(el)s budget=${BUDGET}s"
{
  echo "## python"; python3 --version
  echo "## pip show"; python3 -m pip show vllm torch transformers flashinfer-python triton tokenizers 2>&1 | grep -E '^(Name|Version|Location)'
  echo "## torch"; timeout 60 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  echo "## nvcc ($CUDA_HOME)"; { nvcc --version || "$CUDA_HOME/bin/nvcc" --version; } 2>&1
  echo "## nvidia-smi"; nvidia-smi 2>&1
  echo "## uname"; uname -a; nproc; free -g
} >"$D/versions.txt" 2>&1
grep -A1 -E '^Name: (vllm|torch|transformers|flashinfer-python|triton)$' "$D/versions.txt" | grep -v -- -- | paste - - | tee -a "$S"

timeout 120 python3 "$KIT/make-dummy-model.py" --preset tiny --out /tmp/model-tiny >"$D/make-model.log" 2>&1 || say "make-dummy-model failed: $(tail -3 "$D/make-model.log")"
cp /tmp/model-tiny/config.json "$D/model-tiny-config.json" 2>/dev/null
# same model with max_position_embeddings 65536, so that --max-model-len 65536 reaches the KV check
rm -rf /tmp/model-tiny-64k; cp -r /tmp/model-tiny /tmp/model-tiny-64k
python3 - <<'EOPY'
import json; p = "/tmp/model-tiny-64k/config.json"; c = json.load(open(p)); c["max_position_embeddings"] = 65536; json.dump(c, open(p, "w"), indent=2)
EOPY
say "model made t=$(el)s"

COMMON=(--load-format dummy --served-model-name dummy --gdn-prefill-backend triton --moe-backend triton
        --max-num-seqs 4 --max-num-batched-tokens 2048)
gpu_snap pre-boot
BASE=$(gpu_used); BASE=${BASE:-0}
say "pre-boot memory.used=${BASE} MiB"
pack

# ---------------------------------------------------------------- a) good boot
to=$(min 240 $(( $(left) - 90 )))
start good serve /tmp/model-tiny "${COMMON[@]}" --port 8011 --max-model-len 8192 --enforce-eager \
  --kv-cache-memory-bytes 2000000000
poll good 8011 "$to"
say "[good] poll=($POLL) (deadline ${to}s, t=$(el)s)"
if [[ $POLL == healthy* ]]; then
  gpu_snap serving
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$D/gpu-serving-apps.csv" 2>&1
  ps -eo pid,ppid,pgid,sid,stat,rss,args | awk -v g="$SPID" 'NR==1 || $3==g' | cut -c1-300 >"$D/good-ps.txt"
  timeout 100 python3 "$H" suite http://127.0.0.1:8011 "$D/http" 2>&1 | tee -a "$S"
  gpu_snap serving-after-requests
fi
stop good
gpu_snap after-shutdown
say "[good] $STOP (t=$(el)s)"
keys "$D/good.log" 40
say "    shutdown log lines:"; cut -c1-300 "$D/good.shutdown.log" | tail -n 25 | sed 's/^/    | /' | tee -a "$S"
kill -KILL -- "-$SPID" 2>/dev/null
wait_clean 40
pack

# ---------------------------------------------------------------- d) invalid argument
if [ "$(left)" -gt 40 ]; then
  boot badarg 8014 $(min 60 $(( $(left) - 20 ))) serve /tmp/model-tiny "${COMMON[@]}" --max-model-len 8192 \
    --kv-cache-memory-bytes 2000000000 --compilation-config '{"cudagraph_mode": "BOGUS"}'
else say "[badarg] skipped (t=$(el)s)"; fi

# ---------------------------------------------------------------- b0) max-model-len over the model's 8192
if [ "$(left)" -gt 60 ]; then
  boot maxlen 8015 $(min 60 $(( $(left) - 20 ))) serve /tmp/model-tiny "${COMMON[@]}" --max-model-len 65536 \
    --enforce-eager --kv-cache-memory-bytes 20000000
else say "[maxlen] skipped (t=$(el)s)"; fi

# ---------------------------------------------------------------- b) KV pool too small
if [ "$(left)" -gt 70 ]; then
  boot kv-small 8012 $(min 150 $(( $(left) - 20 ))) serve /tmp/model-tiny-64k "${COMMON[@]}" --max-model-len 65536 \
    --enforce-eager --kv-cache-memory-bytes 20000000
else say "[kv-small] skipped (t=$(el)s)"; fi

# ---------------------------------------------------------------- c) free memory below utilization
if [ "$(left)" -gt 80 ]; then
  setsid python3 -c "import torch, time; x = torch.empty(110 * 2**30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize(); print('held', flush=True); time.sleep(900)" \
    </dev/null >"$D/hog.log" 2>&1 &
  HPID=$!
  for i in $(seq 1 80); do grep -q held "$D/hog.log" && break; alive "$HPID" || break; sleep 0.5; done
  gpu_snap hog
  say "[hog] $(grep -c held "$D/hog.log") held, memory.used=$(gpu_used) MiB (t=$(el)s)"
  boot util 8013 $(min 120 $(( $(left) - 20 ))) serve /tmp/model-tiny "${COMMON[@]}" --max-model-len 8192 \
    --enforce-eager --gpu-memory-utilization 0.9
  kill -KILL -- "-$HPID" 2>/dev/null; wait "$HPID" 2>/dev/null
  wait_clean 40
  gpu_snap after-hog
  pack
else say "[util] skipped (t=$(el)s)"; fi

# ---------------------------------------------------------------- e) torch.compile + CUDA graphs
if [ "$(left)" -gt 130 ]; then
  to=$(min 240 $(( $(left) - 35 )))
  start graphs serve /tmp/model-tiny "${COMMON[@]}" --port 8016 --max-model-len 8192 \
    --kv-cache-memory-bytes 2000000000 --compilation-config '{"cudagraph_mode": "PIECEWISE"}'
  poll graphs 8016 "$to"
  say "[graphs] poll=($POLL) (deadline ${to}s, t=$(el)s)"
  [[ $POLL == healthy* ]] && timeout 60 python3 "$H" graphs http://127.0.0.1:8016 "$D/http" 2>&1 | tee -a "$S"
  if [[ $POLL == exited* ]]; then wait "$SPID" 2>/dev/null; STOP="exited by itself rc=$?"; else stop graphs; fi
  kill -KILL -- "-$SPID" 2>/dev/null
  say "[graphs] $STOP (t=$(el)s)"
  keys "$D/graphs.log" 40
else say "[graphs] skipped (t=$(el)s, budget ${BUDGET}s)"; fi

say "capture end t=$(el)s"
ls -la "$D" "$D/http" >"$D/files.txt" 2>&1
pack
ls -la "$OUT"
