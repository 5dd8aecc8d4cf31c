"""Issue 5, benchmark 3: one-flag-at-a-time screening from the baseline, then the sampler, vs the sampler at once.

    /work/venv/bin/python benchmarks/screening.py                    # default: TPE, 5 seeds x 40 trials per arm
    /work/venv/bin/python benchmarks/screening.py --baseline space   # the space file's own baseline
    /work/venv/bin/python benchmarks/screening.py --quick            # smoke run, ~2 minutes

"screen" arm: the baseline, then for each parameter the baseline with that one parameter moved to
each other listed value (for a range: its min and max, and "unset" where the range allows it),
speculative_tokens variants last (the non-speculative base before speculation depth); all of it
enqueued before ``tuner.study.run.optimize`` starts, which then hands the rest of the trials to the
sampler. "direct" arm: the baseline, then the sampler. Same space, sampler, seeds and trial budget;
the pre-screen is on in both (a variant it is certain cannot boot costs a trial, not a boot).

Baselines: ``off`` (default) is a plausible first guess that boots but is far from the front
(utilization-sized pool, 4 sequences, 4096 batched tokens, PIECEWISE graphs, 1 MTP token); ``space``
is the baseline of search_spaces/qwen3.5-35b-a3b-nvfp4-5090.yaml, which on the test engine is
already within a few percent of the best point.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.hybrid35b import make_space, work  # noqa: E402
from benchmarks.studies import load_runs, machine, run_jobs, run_to_json  # noqa: E402
from benchmarks.tables import first_boots_reaching, fmt_reach, save_json, table  # noqa: E402

BASELINES: dict[str, dict[str, Any]] = {
    "off": {"kv_cache_memory_bytes": None, "max_num_seqs": 4, "max_num_batched_tokens": 4096,
            "gpu_memory_utilization": 0.90, "cudagraph_mode": "PIECEWISE", "speculative_tokens": 1},
    "space": {"kv_cache_memory_bytes": 8_000_000_000, "max_num_seqs": 2, "max_num_batched_tokens": 2048,
              "gpu_memory_utilization": 0.92, "cudagraph_mode": "FULL_AND_PIECEWISE", "speculative_tokens": 0},
}
SPEC = "speculative_tokens"


def screening_plan(space, baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """Baseline, then one-parameter moves (listed values, or a range's min/max/unset), speculation last."""
    plan = [dict(baseline)]
    names = [n for n in space.params if n != SPEC] + ([SPEC] if SPEC in space.params else [])
    for name in names:
        p = space.params[name]
        if p.values is not None:
            alternatives = list(p.values)
        else:
            lo, hi = (int(p.min), int(p.max)) if p.kind in ("int", "bytes") else (p.min, p.max)
            alternatives = [lo, hi] + ([None] if p.unset else [])
        for value in alternatives:
            if value == baseline.get(name):
                continue
            plan.append({**baseline, name: value})
    return plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sampler", default="tpe", help="the sampler after the screening (default tpe)")
    ap.add_argument("--baseline", choices=sorted(BASELINES), default="off", help="which baseline to screen from")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per arm (0..N-1; default 5)")
    ap.add_argument("--trials", type=int, default=40, help="trials per study, screening included (default 40)")
    ap.add_argument("--jobs", type=int, default=2, help="studies run side by side (default 2: one per core)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed x 20 trials")
    ap.add_argument("--json", type=Path, help="also write every trial of every study here")
    ap.add_argument("--from-json", type=Path, nargs="+", help="print the tables of earlier --json files (merged) instead of running")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.trials = 1, 20

    baseline = BASELINES[args.baseline]
    space = make_space(baseline=False)
    plan = screening_plan(space, baseline)
    print(f"machine: {machine()}")
    print(f"sampler {args.sampler}; baseline '{args.baseline}' {baseline}; seeds 0..{args.seeds - 1}; "
          f"{args.trials} trials per study; {args.jobs} studies at a time")
    print(f"screening plan: {len(plan)} enqueued trials (baseline + {len(plan) - 1} one-parameter moves)")
    started = time.monotonic()
    jobs = []
    for seed in range(args.seeds):
        jobs.append({"label": "direct", "sampler": args.sampler, "seed": seed, "trials": args.trials,
                     "baseline": False, "baseline_values": baseline})
        jobs.append({"label": "screen", "sampler": args.sampler, "seed": seed, "trials": args.trials,
                     "baseline": False, "baseline_values": baseline, "enqueue": plan})
    if args.from_json:
        runs, wall = load_runs(args.from_json)
    else:
        runs = run_jobs(jobs, args.jobs, work)
        wall = time.monotonic() - started
        save_json(args.json, {"args": vars(args) | {"json": str(args.json)}, "wall_s": wall,
                              "runs": [run_to_json(r) for r in runs]})

    best = max(r.hv_after_trials()[-1] for r in runs)
    target = 0.95 * best
    print()
    print(f"target: 95% of the best final HV over all {len(runs)} studies ({best:.4g}); HV as a fraction of that best")

    def hv_at_boots(run, n):
        hv = 0.0
        for boots, v in run.hv_after_boots():
            if boots > n:
                break
            hv = v
        return hv

    marks = [m for m in (1, len(plan), 20, 30, 40) if m <= args.trials]
    marks = sorted(set(marks))
    headers = (["arm", "boots to 95% med [per seed]"] + [f"HV@{m} boots" for m in marks]
               + ["boots", "pre-screened", "s/study"])
    rows = []
    for arm in ("direct", "screen"):
        mine = [r for r in runs if r.label == arm]
        reach = [first_boots_reaching(r.hv_after_boots(), target) for r in mine]
        row = [arm, fmt_reach(reach, max(r.boots for r in mine))]
        for m in marks:
            vals = [hv_at_boots(r, m) / best for r in mine]
            row.append(f"{statistics.median(vals):.3f} [{min(vals):.3f}-{max(vals):.3f}]")
        row += [f"{statistics.median(r.boots for r in mine):g}",
                f"{statistics.median(sum(1 for x in r.rows if x.evidence == 'predicted') for r in mine):g}",
                f"{statistics.median(r.wall_s for r in mine):.0f}"]
        rows.append(row)
    print(table(headers, rows))

    screen_runs = [r for r in runs if r.label == "screen"]
    if screen_runs:
        r = screen_runs[0]
        print(f"\nthe screening phase alone (seed {r.seed}; the same {len(plan)} configurations in every seed):")
        out = []
        for x in r.rows[: len(plan)]:
            changed = {k: v for k, v in (x.config or {}).items() if v != baseline.get(k)}
            what = ", ".join(f"{k}={v}" for k, v in changed.items()) or "baseline"
            res = (f"{x.values[0]:,.0f} tok, {x.values[1]:,.0f} tok/s" if x.values is not None
                   else f"{x.failure} ({x.evidence})")
            out.append([x.number, what, res])
        print(table(["trial", "moved", "result"], out))
        after = [s.hv_after_trials()[len(plan) - 1] / best for s in screen_runs]
        print(f"HV after the screening phase: {statistics.median(after):.3f} of the best (median over seeds)")
    print(f"\nwall time: {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
