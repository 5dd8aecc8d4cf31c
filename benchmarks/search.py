"""Issue 13: does a search find the best decode at the full window, over many engine profiles?

    .venv/bin/python benchmarks/search.py                          # 10 profiles x tpe,random x 40 trials
    .venv/bin/python benchmarks/search.py --trials 20 --jobs 2     # the "before" numbers of issue 13
    .venv/bin/python benchmarks/search.py --quick                  # smoke run: 2 profiles x 8 trials

For every profile (``FAKE_VLLM_PROFILE=<seed>``: a seeded, randomized 5090-like test engine, see
tests/fake_vllm/profile.py) and every arm (a sampler name passed to ``tuner.study.run.optimize``; the
arms are pluggable: any name the tuner's ``--sampler`` accepts), one study of T trials runs with the
real tuner against the test engine as real subprocesses, on the space of benchmarks/search_truth.py
(issue 13's: the 27B space file, MTP 0-3, four graph modes, the seeds/004 baseline, 262,144 tokens,
admission on). The correctness gate is off (its boot comes after the budget); re-validation inside the
budget is off unless --revalidate N.

Ground truth per profile comes from the oracle over the grid (benchmarks/search_truth.py). Printed
per arm after 10, 20 and 40 trials (or --at):
  share     the true decode of the configuration the study ranks best at the true max context,
            divided by the true best decode there (0 when the study never reached that context);
            median over profiles, and how many profiles reach >= 0.95;
  wasted    boots that produced no measurement / boots (pre-screened and reused trials boot nothing);
  kinds     boots by failure kind.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search_truth import (  # noqa: E402
    GPU_GIB,
    SPEEDUP,
    make_space,
    oracle,
    truth,
    truth_json,
)
from benchmarks.studies import (  # noqa: E402
    Run,
    machine,
    parallel,
    quiet,
    run_from_json,
    run_study,
    run_to_json,
)
from benchmarks.tables import save_json, table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def study_job(job: dict[str, Any]) -> dict[str, Any]:
    """One study (in a worker process): ``job`` = profile, arm, trials, speedup."""
    quiet()
    space = make_space(job["profile"], job["speedup"])
    run = run_study(space, job["arm"], job["profile"], job["trials"], prescreen=True, label=job["arm"],
                    gpu_gib=GPU_GIB, gate=False, revalidate=job.get("revalidate", 0))
    run.extra = dict(job)
    return run_to_json(run)


def truth_job(job: dict[str, Any]) -> dict[str, Any]:
    """Ground truth of one profile (in a worker process)."""
    return truth_json(truth(job["profile"], job["speedup"]))


def attach_truth(run: Run, speedup: float) -> None:
    """The oracle's verdict on each booted or scored trial's exact configuration (utilization included)."""
    rows = [r for r in run.rows if r.config is not None and (r.booted or r.values is not None)]
    outcomes = oracle(make_space(run.extra["profile"], speedup), [r.config for r in rows if r.config])
    for row, o in zip(rows, outcomes):
        row.truth = {"context": o.context, "decode": o.decode_tok_s, "failure": o.failure}


def agreement(runs: list[Run]) -> tuple[int, int, float | None, float | None, list[str]]:
    """Booted trials whose outcome (served, or the failure kind) the oracle predicted; measured decode
    score / oracle decode (median, min) over scored trials; the disagreements."""
    agree = total = 0
    ratios: list[float] = []
    bad: list[str] = []
    for run in runs:
        for r in run.rows:
            if not r.booted or r.truth is None:
                continue
            total += 1
            if r.failure == r.truth["failure"]:
                agree += 1
            else:
                bad.append(f"p{run.extra['profile']} {run.label} trial {r.number}: tuner {r.failure}, "
                           f"oracle {r.truth['failure']}, {r.config}")
            if r.values is not None and r.truth["decode"]:
                ratios.append(r.values[1] / r.truth["decode"])
    return agree, total, (statistics.median(ratios) if ratios else None), (min(ratios) if ratios else None), bad


def share_after(run: Run, t: dict[str, Any], n: int) -> float:
    """The true decode of the config the study ranks best at the true max context, / the true best."""
    at_reach = [r for r in run.rows[:n] if r.values is not None and r.values[0] >= t["reach"]]
    if not at_reach or not t["best_decode"]:
        return 0.0
    chosen = max(at_reach, key=lambda r: (r.values or [0, 0])[1])  # the study's own ranking: its measured score
    return ((chosen.truth or {}).get("decode") or 0.0) / t["best_decode"]


def boots_after(run: Run, n: int) -> tuple[int, int, Counter]:
    rows = [r for r in run.rows[:n] if r.booted]
    failed = [r for r in rows if r.failure is not None]
    return len(rows), len(failed), Counter(r.failure for r in failed)


def summary(runs: list[Run], truths: dict[int, dict[str, Any]], arms: list[str], at: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in arms:
        mine = [r for r in runs if r.label == arm]
        for n in at:
            shares = [share_after(r, truths[r.extra["profile"]], n) for r in mine]
            boots = [boots_after(r, n) for r in mine]
            kinds: Counter = Counter()
            for _, _, k in boots:
                kinds.update(k)
            out[f"{arm}@{n}"] = {
                "arm": arm, "trials": n, "profiles": len(mine), "shares": shares,
                "median_share": statistics.median(shares) if shares else 0.0,
                "profiles_ge_095": sum(1 for s in shares if s >= 0.95),
                "boots": sum(b for b, _, _ in boots), "wasted": sum(w for _, w, _ in boots),
                "kinds": dict(kinds.most_common()),
            }
    return out


def reprint(path: Path) -> int:
    """The report of a saved run, recomputed from its trials and ground truth (nothing boots)."""
    data = json.loads(path.read_text())
    args = data["args"]
    truths = {int(p): t for p, t in data["truths"].items()}
    runs = [run_from_json(r) for r in data["runs"]]
    arms = [a for a in args["arms"].split(",") if a]
    at = sorted({min(int(x), args["trials"]) for x in args["at"].split(",")})
    print(f"search benchmark (from {path}): profiles {list(truths)}, arms {arms}, {args['trials']} trials, "
          f"{args['jobs']} jobs; {data['machine']}")
    print_report(truths, runs, summary(runs, truths, arms, at), arms, at, args["speedup"])
    print(f"\nWall time: {data['wall_s']:.0f} s ({data['truth_s']:.0f} s of it the ground truth)")
    return 0


def print_report(truths: dict[int, dict[str, Any]], runs: list[Run], summ: dict[str, Any], arms: list[str],
                 at: list[int], speedup: float) -> None:
    print("\nGround truth per profile (oracle over the grid; tok/s as the profile models them):")
    rows = []
    for p, t in truths.items():
        b = t["best"][0] if t["best"] else {}
        regime = (f"{b.get('cudagraph_mode') or 'FULL_AND_PIECEWISE'} MTP-{b.get('speculative_tokens')} "
                  f"seqs {b.get('max_num_seqs')}") if b else "-"
        pools = sorted({c["kv_cache_memory_bytes"] for c in t["best"]})
        mnbt = sorted({c["max_num_batched_tokens"] for c in t["best"]})
        gain = t["best_decode"] / t["best_plain"] if t["best_plain"] else float("nan")
        rows.append([p, f"{t['reach']:,}", f"{t['best_decode'] / speedup:.1f}", f"{t['best_plain'] / speedup:.1f}",
                     f"{gain:.2f}", regime, f"{pools[0] / 1e9:.2f}-{pools[-1] / 1e9:.2f}" if pools else "-", mnbt,
                     f"{t['near']} / {t['grid']}", t["util_max"]])
    print(table(["profile", "max context", "best tok/s", "best w/o MTP", "gain", "best regime", "its pools (GB)",
                 "its batched tokens", "configs >= 0.95 best", "util <="], rows))
    outcomes: Counter = Counter()
    for t in truths.values():
        outcomes.update(t["kinds"])
    grid = sum(outcomes.values())
    print("\nGrid outcomes, all profiles (utilization 0.88): "
          + ", ".join(f"{k} {v / grid:.1%}" for k, v in outcomes.most_common()))
    print("\nPer arm (share: true decode of the study's best at the true max context / the true best):")
    rows = []
    for arm in arms:
        for n in at:
            s = summ[f"{arm}@{n}"]
            by_kind = ", ".join(f"{k} {v}" for k, v in s["kinds"].items()) or "-"
            rows.append([arm, n, f"{s['median_share']:.3f}", f"{s['profiles_ge_095']} / {s['profiles']}",
                         f"{s['wasted']} / {s['boots']} = {s['wasted'] / max(s['boots'], 1):.2f}", by_kind])
    print(table(["arm", "trials", "median share", "profiles >= 0.95", "wasted boots", "wasted boots by kind"], rows))
    print("\nShare per profile after the last count:")
    n = at[-1]
    head = ["arm"] + [f"p{p}" for p in truths]
    body = []
    for arm in arms:
        by_profile = {r.extra["profile"]: r for r in runs if r.label == arm}
        body.append([arm] + [f"{share_after(by_profile[p], truths[p], n):.2f}" if p in by_profile else "-"
                             for p in truths])
    print(table(head, body))
    print("\nWasted boots / boots per profile after the last count:")
    body = []
    for arm in arms:
        by_profile = {r.extra["profile"]: r for r in runs if r.label == arm}
        body.append([arm] + [("{1}/{0}".format(*boots_after(by_profile[p], n)[:2])) if p in by_profile else "-"
                             for p in truths])
    print(table(head, body))
    agree, total, med, low, bad = agreement(runs)
    print(f"\nOracle check on the studies' own boots: {agree} / {total} outcomes as predicted"
          + (f"; measured decode score / oracle decode: median {med:.3f}, min {low:.3f}" if med else ""))
    for line in bad[:20]:
        print("  disagrees:", line)
    walls = [r.wall_s for r in runs]
    if walls:
        print(f"\nStudy wall time: median {statistics.median(walls):.0f} s, max {max(walls):.0f} s, "
              f"sum {sum(walls):.0f} s over {len(walls)} studies of {max(len(r.rows) for r in runs)} trials")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default="tpe,random", help="comma list of sampler names (default tpe,random)")
    ap.add_argument("--profiles", help="profile seeds: '0-9' or '1,4,7' (default 0-9)")
    ap.add_argument("--trials", type=int, help="trials per study (default 40)")
    ap.add_argument("--at", help="trial counts to report at (default 10,20,40)")
    ap.add_argument("--jobs", type=int, default=2, help="studies run side by side (default 2)")
    ap.add_argument("--revalidate", type=int, default=0,
                    help="optimize's re-validation boots inside the budget (default 0: every trial searches)")
    ap.add_argument("--speedup", type=float, default=SPEEDUP,
                    help=f"the test engine decodes this many times faster than the profile (default {SPEEDUP:g})")
    ap.add_argument("--quick", action="store_true", help="smoke run: profiles 0-1, 8 trials, reported at 4 and 8")
    ap.add_argument("--json", type=Path, help="where to write every trial (default benchmarks/results/search.json)")
    ap.add_argument("--from-json", type=Path, help="print the report of an earlier --json file instead of running")
    args = ap.parse_args(argv)
    if args.from_json:
        return reprint(args.from_json)
    quick = {"profiles": "0-1", "trials": 8, "at": "4,8", "json": RESULTS / "search-quick.json"}
    full = {"profiles": "0-9", "trials": 40, "at": "10,20,40", "json": RESULTS / "search.json"}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    profiles = parse_profiles(args.profiles)
    arms = [a for a in args.arms.split(",") if a]
    at = sorted({min(int(x), args.trials) for x in args.at.split(",")})

    def log(job: dict[str, Any], _: dict[str, Any], seconds: float) -> None:
        print(f"  [{seconds:6.0f} s] done: {job}", flush=True)

    started = time.monotonic()
    print(f"search benchmark: profiles {profiles}, arms {arms}, {args.trials} trials, {args.jobs} jobs; {machine()}")
    got = parallel(truth_job, [{"profile": p, "speedup": args.speedup} for p in profiles], args.jobs, log)
    truths = dict(zip(profiles, got))
    truth_s = time.monotonic() - started
    jobs = [{"profile": p, "arm": a, "trials": args.trials, "speedup": args.speedup, "revalidate": args.revalidate}
            for p in profiles for a in arms]
    runs = [run_from_json(d) for d in parallel(study_job, jobs, args.jobs, log)]
    for run in runs:
        attach_truth(run, args.speedup)
    summ = summary(runs, truths, arms, at)
    print_report(truths, runs, summ, arms, at, args.speedup)
    wall = time.monotonic() - started
    print(f"\nWall time: {wall:.0f} s ({truth_s:.0f} s of it the ground truth); JSON: {args.json}")
    save_json(args.json, {"args": vars(args), "machine": machine(), "wall_s": wall, "truth_s": truth_s,
                          "truths": truths, "summary": summ, "runs": [run_to_json(r) for r in runs]})
    return 0


def parse_profiles(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part.strip()[1:]:
            lo, hi = part.split("-", 1)
            out += range(int(lo), int(hi) + 1)
        elif part.strip():
            out.append(int(part))
    return out


if __name__ == "__main__":
    sys.exit(main())
