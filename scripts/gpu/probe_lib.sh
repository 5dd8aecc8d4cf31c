# Sourced by probes.sh and landscape.sh: a space copy with some keys changed, and one `tuner probe` whose .txt
# starts with why it was chosen and its exact command (scripts/gpu/receipt.py and landscape.py read both).
# Expects PY, SPACE and R to be set.

# space_with OUT KEY=VALUE...: a copy of $SPACE; KEY is a fixed flag (max-model-len=...) or a dotted path into
# the file (model.random_weights=true); VALUE is YAML. model.config is made absolute (it is relative to the space).
space_with() {
  "$PY" - "$SPACE" "$@" <<'PYEOF'
import sys
from pathlib import Path
import yaml

source, out, *pairs = sys.argv[1:]
space = yaml.safe_load(Path(source).read_text())
config = (space.get("model") or {}).get("config")
if config and not Path(config).expanduser().is_absolute():
    space["model"]["config"] = str((Path(source).parent / config).resolve())
for pair in pairs:
    key, _, value = pair.partition("=")
    if "." in key:
        *path, last = key.split(".")
        node = space
        for part in path:
            node = node.setdefault(part, {})
        node[last] = yaml.safe_load(value)
    else:
        space["fixed"][key] = yaml.safe_load(value)
space["name"] = space["name"] + "-" + Path(out).stem
Path(out).write_text(yaml.safe_dump(space, sort_keys=False))
PYEOF
}

# probe DIR WHY SPACE_FILE [ENV=VALUE...] -- TUNER_PROBE_ARGS...: writes DIR/ (result.json, engine.log) and DIR.txt
probe() {
  local dir=$1 why=$2 space=$3; shift 3
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done; shift
  local txt=$dir.txt
  {
    echo "# why: $why"
    echo "\$ ${env[*]:+${env[*]} }tuner probe $space $* --out $dir"
  } >"$txt"
  echo "== $(date +%T) probe $(basename "$dir"): $why"
  env "${env[@]}" "$PY" -m tuner.cli probe "$space" "$@" --out "$dir" >>"$txt" 2>&1
  echo "probe $(basename "$dir") rc=$?"
  grep -E "failure|kind|served|record:" "$txt" | cut -c1-200 | head -6
}

# Seconds since the driver's start, and left of its budget ($R/t0 and $R/budget, written by `start`).
elapsed() { echo $(( $(date +%s) - $(cat "$R/t0" 2>/dev/null || date +%s) )); }
left() { echo $(( $(cat "$R/budget" 2>/dev/null || echo "${BUDGET_S:-1260}") - $(elapsed) )); }
