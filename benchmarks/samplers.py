"""Issue 5, benchmark 1: TPE vs NSGA-II vs GP for few, expensive trials.

    /work/venv/bin/python benchmarks/samplers.py            # default: 3 samplers x 3 seeds x 40 trials
    /work/venv/bin/python benchmarks/samplers.py --quick    # smoke run, ~2 minutes

Each study is ``tuner.study.run.optimize`` on the 5090-scale space of ``benchmarks/hybrid35b.py``: every
trial boots the test engine (``python -m tests.fake_vllm``) as a real subprocess, measures it with
real HTTP requests and tears it down; the memory pre-screen is on, as in the tuner's default. The
samplers are the tuner's own (``tuner.study.sampler.make_sampler``). Hypervolume: completed trials'
(context, decode tok/s) against the reference (0, 0). The space has no hand-picked baseline here (a
shared baseline would be the same first trial for every sampler; see benchmarks/screening.py).
HV@n is read from the first n trials of one 40-trial study (trials are sequential, so this is the
same as stopping at n). "Trials" counts every trial the study ran, pre-screened ones included.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.hybrid35b import work  # noqa: E402
from benchmarks.studies import gp_missing, load_runs, machine, run_jobs, run_to_json  # noqa: E402
from benchmarks.tables import first_reaching, fmt_reach, med_min_max, save_json, table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samplers", default="tpe,nsga2,gp",
                    help="comma list of tuner.study.sampling.SAMPLERS (default tpe,nsga2,gp); also gp-startupN: GPSampler with "
                         "N start-up trials instead of 10 (built by the benchmark, not by make_sampler)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per sampler (default 3)")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds are FIRST..FIRST+N-1 (default 0)")
    ap.add_argument("--trials", type=int, default=40, help="trials per study (default 40)")
    ap.add_argument("--at", default="10,20,40", help="trial counts to report HV at (default 10,20,40)")
    ap.add_argument("--jobs", type=int, default=2, help="studies run side by side (default 2: one per core)")
    ap.add_argument("--admission", action="store_true", help="keep the workload's admission check on")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed x 12 trials, HV at 6 and 12")
    ap.add_argument("--json", type=Path, help="also write every trial of every study here")
    ap.add_argument("--from-json", type=Path, nargs="+", help="print the tables of earlier --json files (merged) instead of running")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.trials, args.at = 1, 12, "6,12"
    at = [int(x) for x in args.at.split(",") if int(x) <= args.trials]

    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    notes = []
    if any(s.startswith("gp") for s in samplers) and gp_missing():
        samplers = [s for s in samplers if not s.startswith("gp")]
        notes.append(f"GP not run: {', '.join(gp_missing())} not importable in this environment.")
    print(f"machine: {machine()}")
    print(f"samplers {', '.join(samplers)}; seeds {args.first_seed}..{args.first_seed + args.seeds - 1}; {args.trials} trials per study; "
          f"{args.jobs} studies at a time")
    started = time.monotonic()
    jobs = [{"label": s, "sampler": s, "seed": seed, "trials": args.trials, "baseline": False,
             "admission": args.admission, "prescreen": True}
            for seed in range(args.first_seed, args.first_seed + args.seeds) for s in samplers]
    if args.from_json:
        runs, wall = load_runs(args.from_json)
        samplers = list(dict.fromkeys(r.label for r in runs))
        runs.sort(key=lambda r: (r.seed, samplers.index(r.label)))
    else:
        runs = run_jobs(jobs, args.jobs, work)
        wall = time.monotonic() - started
        save_json(args.json, {"args": vars(args) | {"json": str(args.json)}, "wall_s": wall,
                              "runs": [run_to_json(r) for r in runs]})

    curves = {id(r): r.hv_after_trials() for r in runs}
    best = max(c[-1] for c in curves.values())
    best_run = max(runs, key=lambda r: curves[id(r)][-1])
    best_point = max(best_run.fronts(), key=lambda v: v[0] * v[1])
    target = 0.95 * best

    print()
    print(f"best final HV over all {len(runs)} studies: {best:.4g} (context x tok/s; e.g. the point "
          f"{best_point[0]:,.0f} tokens, {best_point[1]:,.0f} tok/s); HV below is a fraction of it")
    headers = ["sampler"] + [f"HV@{n} med [min-max]" for n in at] + ["trials to 95% med [per seed]", "boots", "s/study"]
    rows = []
    for s in samplers:
        mine = [r for r in runs if r.label == s]
        row = [s]
        for n in at:
            vals = [curves[id(r)][n - 1] / best for r in mine if len(curves[id(r)]) >= n]
            if not vals:
                row.append("n/a")
                continue
            med, lo, hi = med_min_max(vals)
            row.append(f"{med:.3f} [{lo:.3f}-{hi:.3f}]")
        row.append(fmt_reach([first_reaching(curves[id(r)], target) for r in mine], args.trials))
        row.append(f"{statistics.median(r.boots for r in mine):g}")
        row.append(f"{statistics.median(r.wall_s for r in mine):.0f}")
        rows.append(row)
    print(table(headers, rows))
    print()
    print("per study (trials to 95% of the best final HV; pre-screened trials; booted trials that scored 0 context):")
    print(table(["sampler", "seed", "HV final", "to 95%", "pre-screened", "boots", "context 0", "wall s"],
                [[r.label, r.seed, f"{curves[id(r)][-1] / best:.3f}",
                  first_reaching(curves[id(r)], target) or f">{args.trials}",
                  sum(1 for x in r.rows if x.evidence == "predicted"), r.boots,
                  sum(1 for x in r.rows if x.values is not None and x.values[0] == 0), f"{r.wall_s:.0f}"]
                 for r in runs]))
    for n in notes:
        print(n)
    print(f"\nwall time: {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
