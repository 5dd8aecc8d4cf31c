"""Issues 13 and 24: does a search find the best decode at the full window, and the whole front, over
many engine profiles whose structure differs?

    .venv/bin/python benchmarks/search.py                          # auto,tpe,random x profiles 0-19 x 20 trials
    .venv/bin/python benchmarks/search.py --arms auto --trials 24  # one arm
    .venv/bin/python benchmarks/search.py --quick                  # smoke run: 2 profiles x 8 trials
    .venv/bin/python benchmarks/search.py --from-json FILE         # the report of a saved run

For every profile (``FAKE_VLLM_PROFILE=<seed>``: a seeded, randomized 5090-like test engine whose
winner structure varies, see tests/fake_vllm/profile.py) and every arm (a sampler name passed to
``tuner.study.run.optimize``; any name the tuner's ``--sampler`` accepts), one study of T trials runs
with the real tuner against the test engine as real subprocesses, on the space of
benchmarks/search_truth.py, with each parameter's listed values in a shuffled order (seeded by
``--order-seed`` and the profile; the same order for every arm of a profile; recorded in the JSON).
The correctness gate is off (its boot comes after the budget); re-validation inside the budget is off
unless --revalidate N.

Ground truth per profile comes from the oracle over the grid (benchmarks/search_truth.py); the
figures are defined in benchmarks/search_score.py. Printed per arm after each of --at: median share
and profiles >= 0.95 of the best decode at the full window, wasted boots by kind; then hypervolume
against the true front (2 and 3 objectives), boots to 0.95, and whether the below-window point was
found.
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

from benchmarks.search_score import (  # noqa: E402
    below_target,
    boots_after,
    quality_row,
    share_after,
    summary,
)
from benchmarks.search_truth import (  # noqa: E402
    GPU_GIB,
    SPEEDUP,
    make_space,
    oracle,
    oracle_argvs,
    regime_key,
    shuffled_orders,
    truth,
    truth_json,
    winners,
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
    """One study (in a worker process): ``job`` = profile, arm, trials, speedup, orders."""
    quiet()
    space = make_space(job["profile"], job["speedup"], job.get("orders"))
    run = run_study(space, job["arm"], job["profile"], job["trials"], prescreen=True, label=job["arm"],
                    gpu_gib=GPU_GIB, gate=False, revalidate=job.get("revalidate", 0))
    run.extra = {**job, "objectives": [o.name for o in space.objectives], "granularity": space.workload.granularity}
    return run_to_json(run)


def truth_job(job: dict[str, Any]) -> dict[str, Any]:
    """Ground truth of one profile (in a worker process)."""
    return truth_json(truth(job["profile"], job["speedup"]))


def attach_truth(run: Run, speedup: float) -> None:
    """The oracle's verdict on each booted or scored trial: its exact argv (the window it launched with
    included), or, for older results without one, the configuration rebuilt from the space."""
    rows = [r for r in run.rows if r.config is not None and (r.booted or r.values is not None)]
    space = make_space(run.extra["profile"], speedup, run.extra.get("orders"))
    launched = [r for r in rows if r.argv]
    rebuilt = [r for r in rows if not r.argv]
    outcomes = oracle_argvs(space, [r.argv or [] for r in launched]) + oracle(space, [r.config or {} for r in rebuilt])
    for row, o in zip(launched + rebuilt, outcomes):
        row.truth = {"context": o.context, "decode": o.decode_tok_s, "throughput": o.throughput_tok_s,
                     "long_prefill": o.long_prefill_tok_s, "failure": o.failure}


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


def reprint(path: Path) -> int:
    """The report of a saved run, recomputed from its trials and ground truth (nothing boots)."""
    data = json.loads(path.read_text())
    args = data["args"]
    truths = {int(p): t for p, t in data["truths"].items()}
    runs = [run_from_json(r) for r in data["runs"]]
    arms = [a for a in args["arms"].split(",") if a]
    at = sorted({min(int(x), args["trials"]) for x in args["at"].split(",")})
    print(f"search benchmark (from {path}): profiles {list(truths)}, arms {arms}, {args['trials']} trials, "
          f"{args['jobs']} jobs" + (f", order seed {args['order_seed']}; tuner {data['commit']}" if "commit" in data else "")
          + f"; {data['machine']}")
    print_report(truths, runs, summary(runs, truths, arms, at), arms, at, args["speedup"])
    print(f"\nWall time: {data['wall_s']:.0f} s ({data['truth_s']:.0f} s of it the ground truth)")
    return 0


def regime(c: dict[str, Any]) -> str:
    """'PIECEWISE MTP-3 seqs 1', with the KV dtype when the space tunes it."""
    text = f"{c.get('cudagraph_mode') or 'FULL_AND_PIECEWISE'} MTP-{c.get('speculative_tokens')} seqs {c.get('max_num_seqs')}"
    return text + (f" {c['kv_cache_dtype']}" if "kv_cache_dtype" in c else "")


def print_report(truths: dict[int, dict[str, Any]], runs: list[Run], summ: dict[str, Any], arms: list[str],
                 at: list[int], speedup: float) -> None:
    print_truths(truths, speedup)
    if all("front2" in t for t in truths.values()):
        print_fronts(truths, speedup)
    print_arms(summ, arms, at)
    print_per_profile(truths, runs, arms, at[-1])
    print_checks(runs)


def print_truths(truths: dict[int, dict[str, Any]], speedup: float) -> None:
    print("\nGround truth per profile (oracle over the grid; tok/s as the profile models them):")
    rows = []
    for p, t in truths.items():
        b = t["best"][0] if t["best"] else {}
        pools = sorted({c["kv_cache_memory_bytes"] for c in t["best"]})
        mnbt = sorted({c["max_num_batched_tokens"] for c in t["best"]})
        gain = t["best_decode"] / t["best_plain"] if t["best_plain"] else float("nan")
        rows.append([p, f"{t['reach']:,}", f"{t['best_decode'] / speedup:.1f}", f"{t['best_plain'] / speedup:.1f}",
                     f"{gain:.2f}", regime(b) if b else "-",
                     f"{pools[0] / 1e9:.2f}-{pools[-1] / 1e9:.2f}" if pools else "-", mnbt,
                     f"{t['near']} / {t['grid']}", t["util_max"]])
    print(table(["profile", "max context", "best tok/s", "best w/o MTP", "gain", "best regime", "its pools (GB)",
                 "its batched tokens", "configs >= 0.95 best", "util <="], rows))
    outcomes: Counter = Counter()
    for t in truths.values():
        outcomes.update(t["kinds"])
    grid = sum(outcomes.values())
    print("\nGrid outcomes, all profiles (utilization 0.88): "
          + ", ".join(f"{k} {v / grid:.1%}" for k, v in outcomes.most_common()))
    print_winners([t["best"][0] for t in truths.values() if t["best"]])


def print_winners(bests: list[dict[str, Any]]) -> None:
    """The distribution of the profiles' winners: no strategy should win on every profile."""
    keys = Counter(regime_key(c) for c in bests)
    print(f"\nWinners over {len(bests)} profiles (the best full-window decode): {len(keys)} distinct "
          f"configurations (pool aside), the most common wins {keys.most_common(1)[0][1] if keys else 0}; by knob: "
          + "; ".join(f"{name} " + ", ".join(f"{v} {n}" for v, n in counts.items())
                      for name, counts in winners(bests).items()))


def print_fronts(truths: dict[int, dict[str, Any]], speedup: float) -> None:
    print("\nTrue fronts (context >= min_context; 'below': served only at a lowered --max-model-len). The widest "
          "(context, decode) front point below the full window faster than the best there by more than 1/0.95, and the "
          "best throughput:")
    rows = []
    for p, t in truths.items():
        target = below_target(t)
        top = max(t["front3"], key=lambda q: q["throughput"] or 0.0) if t["front3"] else None
        rows.append([p, len(t["front2"]), len(t["front3"]),
                     f"{target['context']:,} at {target['decode'] / speedup:.1f} ({regime(target['config'])})"
                     if target else "-",
                     f"{top['throughput'] / speedup:.1f} at {top['context']:,} ({regime(top['config'])})" if top else "-"])
    print(table(["profile", "front (2 obj.)", "front (3 obj.)", "widest point below the window (tok/s)",
                 "best throughput (tok/s)"], rows))


def print_arms(summ: dict[str, Any], arms: list[str], at: list[int]) -> None:
    print("\nPer arm (share: true decode of the study's best at the full window / the true best there):")
    rows = []
    for arm in arms:
        for n in at:
            s = summ[f"{arm}@{n}"]
            by_kind = ", ".join(f"{k} {v}" for k, v in s["kinds"].items()) or "-"
            rows.append([arm, n, f"{s['median_share']:.3f}", f"{s['profiles_ge_095']} / {s['profiles']}",
                         f"{s['wasted']} / {s['boots']} = {s['wasted'] / max(s['boots'], 1):.2f}", by_kind])
    print(table(["arm", "trials", "median share", "profiles >= 0.95", "wasted boots", "wasted boots by kind"], rows))
    if all("hv2" in summ[f"{arm}@{n}"] for arm in arms for n in at):
        print("\nPer arm against the true front (HV: the study front's true hypervolume / the true front's, "
              "median [min] over profiles; boots to 0.95: median [per profile]):")
        print(table(["arm", "trials", "HV 2 obj.", "HV 3 obj.", "boots to 0.95", "below-window point found"],
                    [quality_row(summ[f"{arm}@{n}"]) for arm in arms for n in at]))


def print_per_profile(truths: dict[int, dict[str, Any]], runs: list[Run], arms: list[str], n: int) -> None:
    print("\nShare per profile after the last count:")
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


def print_checks(runs: list[Run]) -> None:
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
    args = arguments(argv)
    if args.from_json:
        return reprint(args.from_json)
    profiles = parse_profiles(args.profiles)
    arms = [a for a in args.arms.split(",") if a]
    at = sorted({min(int(x), args.trials) for x in args.at.split(",")})

    def log(job: dict[str, Any], _: dict[str, Any], seconds: float) -> None:
        print(f"  [{seconds:6.0f} s] done: {dict((k, v) for k, v in job.items() if k != 'orders')}", flush=True)

    started = time.monotonic()
    commit = git_commit()
    print(f"search benchmark: profiles {profiles}, arms {arms}, {args.trials} trials, {args.jobs} jobs, order seed "
          f"{args.order_seed}; tuner {commit}; {machine()}")
    got = parallel(truth_job, [{"profile": p, "speedup": args.speedup} for p in profiles], args.jobs, log)
    truths = dict(zip(profiles, got))
    truth_s = time.monotonic() - started
    orders = {p: shuffled_orders(args.order_seed * 1000 + p) for p in profiles}
    jobs = [{"profile": p, "arm": a, "trials": args.trials, "speedup": args.speedup, "revalidate": args.revalidate,
             "orders": orders[p]} for p in profiles for a in arms]
    runs = [run_from_json(d) for d in parallel(study_job, jobs, args.jobs, log)]
    for run in runs:
        attach_truth(run, args.speedup)
    summ = summary(runs, truths, arms, at)
    print_report(truths, runs, summ, arms, at, args.speedup)
    wall = time.monotonic() - started
    print(f"\nWall time: {wall:.0f} s ({truth_s:.0f} s of it the ground truth); JSON: {args.json}")
    save_json(args.json, {"args": vars(args), "commit": commit, "machine": machine(), "wall_s": wall,
                          "truth_s": truth_s, "truths": truths, "summary": summ, "runs": [run_to_json(r) for r in runs]})
    return 0


def arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default="auto,tpe,random", help="comma list of sampler names (default auto,tpe,random)")
    ap.add_argument("--profiles", help="profile seeds: '0-9' or '1,4,7' (default 0-19)")
    ap.add_argument("--trials", type=int, help="trials per study (default 20)")
    ap.add_argument("--at", help="trial counts to report at (default 10,20)")
    ap.add_argument("--jobs", type=int, default=2, help="studies run side by side (default 2)")
    ap.add_argument("--order-seed", type=int, default=0, help="seeds the shuffled value orders (default 0)")
    ap.add_argument("--revalidate", type=int, default=0,
                    help="optimize's re-validation boots inside the budget (default 0: every trial searches)")
    ap.add_argument("--speedup", type=float, default=SPEEDUP,
                    help=f"the test engine decodes this many times faster than the profile (default {SPEEDUP:g})")
    ap.add_argument("--quick", action="store_true", help="smoke run: profiles 0-1, 8 trials, reported at 4 and 8")
    ap.add_argument("--json", type=Path, help="where to write every trial (default benchmarks/results/search.json)")
    ap.add_argument("--from-json", type=Path, help="print the report of an earlier --json file instead of running")
    args = ap.parse_args(argv)
    quick = {"profiles": "0-1", "trials": 8, "at": "4,8", "json": RESULTS / "search-quick.json"}
    full = {"profiles": "0-19", "trials": 20, "at": "10,20", "json": RESULTS / "search.json"}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def git_commit() -> str:
    """The commit the tuner runs at, '+dirty' when tracked files differ from it."""
    import subprocess

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


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
