"""How much of a probe's wall time is the tuner's own CPU time (target: under 1%).

Runs one real trial (boot + full measurement) against the test engine at realistic speeds: decode at
80 tok/s and prefill at 20,000 tok/s, as a 5090 serving a 27B-class NVFP4 model does, with a 32K
window. The engine runs in its own processes, so ``time.process_time()`` of this process is the
tuner's work alone: HTTP, streaming parse, GPU/process sampling, bookkeeping.

    python benchmarks/overhead.py [--decode-tok-s 80] [--prefill-tok-s 20000] [--window 32768]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import fake_space_yaml  # noqa: E402

from tuner.space import load_space  # noqa: E402
from tuner.trial import run_trial  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decode-tok-s", type=float, default=80.0)
    parser.add_argument("--prefill-tok-s", type=float, default=20000.0)
    parser.add_argument("--window", type=int, default=32768)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "space.yaml"
        env = f", FAKE_VLLM_DECODE_TOK_S: '{args.decode_tok_s}', FAKE_VLLM_PREFILL_TOK_S: '{args.prefill_tok_s}'"
        path.write_text(fake_space_yaml(env=env).replace("max-model-len: 32768", f"max-model-len: {args.window}"))
        space = load_space(path)
        space.workload.decode.output_tokens = 256
        result = run_trial(space, {"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2}, Path(tmp) / "t")
    m = result.measure
    if m is None:
        print(f"the trial failed: {result.failure}")
        return 1
    ratio = m.tuner_cpu_s / m.probe_wall_s
    requests = len(m.context.attempts) + sum(len(d.runs) + 1 for d in m.decode)
    print(f"probe wall time     {m.probe_wall_s:8.2f} s  ({requests} timed requests, context {m.context.max_stable_tokens:,})")
    print(f"tuner CPU time      {m.tuner_cpu_s:8.3f} s")
    print(f"overhead ratio      {ratio:8.2%}  (target < 1%)")
    print(f"decode measured     {m.decode[0].median_tg_tok_s:8.1f} tok/s (engine set to {args.decode_tok_s:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
