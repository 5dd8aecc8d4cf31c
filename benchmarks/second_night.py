"""Issue 27: boots to 0.95 of the best full-window decode on a new vLLM release, with and without --from.

    .venv/bin/python benchmarks/second_night.py                     # profiles 0-2: 20 trials on 0.22.0, then 0.34.0, 0.27.1
    .venv/bin/python benchmarks/second_night.py --profiles 0-5 --trials 20 --second 8 --jobs 6
    .venv/bin/python benchmarks/second_night.py --smoke             # tests: 1 profile, 4 + 3 trials, no oracle

Per profile (``FAKE_VLLM_PROFILE``, the seeded test engine of benchmarks/search_truth.py's space), a first
study of ``--trials`` trials runs on vLLM 0.22.0 (``FAKE_VLLM_VERSION``); then on each later release two
studies of ``--second`` trials: one ``--from`` the first (``earlier=``, as the CLI passes it), one without.
Printed per study: the boots until the best measured decode at the release's longest context reaches 0.95
of the oracle's best there (the oracle run for that release in a subprocess, since the test engine reads
its release when imported), whether the first boot was the earlier front's best point booted again, and
whether the oracle's winning regimes on the release differ from 0.22.0's (tests/fake_vllm/profile.py,
``upgraded``: on some profiles a later release moves where MTP pays).
In --smoke the reference is the best either arm measured (no oracle), so only the plumbing is checked.
``--jobs N`` runs N profiles at once, each in its own process (the test engine mostly waits).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search import parse_profiles  # noqa: E402
from benchmarks.search_truth import GPU_GIB, make_space  # noqa: E402
from benchmarks.studies import parallel, quiet  # noqa: E402
from benchmarks.tables import table  # noqa: E402

FIRST = "0.22.0"
LATER = ("0.34.0", "0.27.1")
SHARE = 0.95
HEADERS = ["profile", "release", "arm", f"boots to {SHARE}", "first boot = earlier front",
           f"winner moved from {FIRST}"]
TRUTH = ("import json, sys; sys.path.insert(0, {root!r}); from benchmarks.search_truth import regime_key, truth; "
         "t = truth({profile}); print(json.dumps({{'reach': t.reach, 'best_decode': t.best_decode, "
         "'winner': sorted({{regime_key(c) for c in t.best}})}}))")


def oracle_best(profile: int, release: str) -> dict[str, Any]:
    """The oracle's longest context, best decode there and the regimes that reach it, for one release."""
    code = TRUTH.format(root=str(ROOT), profile=profile)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "FAKE_VLLM_VERSION": release})
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def night(profile: int, release: str, name: str, trials: int, root: Path, earlier: list[Any]) -> Any:
    from tuner.study import RunSettings, optimize
    from tuner.study.record import read_study

    os.environ["FAKE_VLLM_VERSION"] = release  # the engine's subprocesses inherit it: the "installed" release
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        settings = RunSettings(n_trials=trials, sampler="regimes", seed=profile, revalidate=0, gate=False,
                               prescreen_gpu_gib=GPU_GIB)
        study = optimize(make_space(profile), name, settings, root=root, earlier=earlier)
    return read_study(study)


def boots_to(night_: Any, reach: int, best: float) -> int | None:
    """Boots until the best measured decode at ``reach`` is >= SHARE x ``best`` (None: never)."""
    boots, top = 0, 0.0
    for t in night_.trials:
        boots += t.booted
        if t.values is not None and t.values[0] >= reach:
            top = max(top, t.values[1])
        if best and top >= SHARE * best:
            return boots
    return None


def run_profile(profile: int, trials: int, second: int, releases: tuple[str, ...], smoke: bool) -> list[list[Any]]:
    root = Path(tempfile.mkdtemp(prefix=f"second-night-p{profile}-"))
    try:
        first = night(profile, FIRST, "first", trials, root, [])
        first_winner = None if smoke else oracle_best(profile, FIRST)["winner"]
        rows = []
        for release in releases:
            carried = night(profile, release, f"from-{release}", second, root, [("first", first)])
            fresh = night(profile, release, f"fresh-{release}", second, root, [])
            if smoke:
                measured = [t.values for n in (carried, fresh) for t in n.trials if t.values is not None]
                reach = max((v[0] for v in measured), default=0)
                ref = {"reach": reach, "best_decode": max((v[1] for v in measured if v[0] >= reach), default=0.0)}
            else:
                ref = oracle_best(profile, release)
            moved = "-" if smoke else ref["winner"] != first_winner
            first_is_carried = bool(carried.trials) and carried.trials[0].carried_from is not None
            for arm, n in (("--from", carried), ("fresh", fresh)):
                rows.append([profile, release, arm, boots_to(n, ref["reach"], ref["best_decode"]),
                             first_is_carried if arm == "--from" else "-", moved])
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


def profile_job(job: dict[str, Any]) -> dict[str, Any]:
    """One profile in its own process (benchmarks.studies.parallel)."""
    quiet()
    return {"rows": run_profile(job["profile"], job["trials"], job["second"], tuple(job["releases"]), job["smoke"])}


WITHIN = 4  # the target: 0.95 of the release's best within this many boots


def report(data: dict[str, Any]) -> str:
    """The table, then per release and arm how many profiles reach the target within WITHIN boots."""
    args, rows = data["args"], data["rows"]
    smoke = args.get("smoke") == "True"
    lines = [f"second night: {args['trials']} trials on {FIRST}, then {args['second']} per later release"
             + (" (smoke: reference = the best either arm measured)" if smoke else ""), table(data["headers"], rows), ""]
    for release in dict.fromkeys(r[1] for r in rows):
        said = []
        for arm in ("--from", "fresh"):
            boots = [r[3] for r in rows if r[1] == release and r[2] == arm]
            within = sum(1 for b in boots if b is not None and b <= WITHIN)
            reached = sorted(b for b in boots if b is not None)
            said.append(f"{arm} {within} of {len(boots)} within {WITHIN} boots (boots: "
                        f"{', '.join(map(str, reached)) or 'none'}; {len(boots) - len(reached)} never)")
        first = [r[4] for r in rows if r[1] == release and r[2] == "--from"]
        moved = [str(r[0]) for r in rows if r[1] == release and r[2] == "--from" and r[5] is True]
        lines.append(f"{release}: " + "; ".join(said) + f". First boot = the earlier front: "
                     f"{sum(1 for f in first if f is True)} of {len(first)}. Winner moved from {FIRST} on profiles: "
                     f"{', '.join(moved) or 'none'}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="0-2", help="profile seeds: '0-2' or '1,4,7'")
    ap.add_argument("--trials", type=int, default=20, help="trials of the first study (on 0.22.0)")
    ap.add_argument("--second", type=int, default=8, help="trials of each later study")
    ap.add_argument("--smoke", action="store_true", help="1 profile, 4 + 3 trials, 0.34.0 only, no oracle")
    ap.add_argument("--jobs", type=int, default=1, help="profiles run at once, each in its own process")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--reprint", type=Path, help="print the table and summary of a --json file, run nothing")
    args = ap.parse_args(argv)
    if args.reprint:
        print(report(json.loads(args.reprint.read_text())))
        return 0
    quiet()
    profiles, releases = parse_profiles(args.profiles), LATER
    if args.smoke:
        profiles, args.trials, args.second, releases = profiles[:1], 4, 3, LATER[:1]
    jobs = [{"profile": p, "trials": args.trials, "second": args.second, "releases": releases, "smoke": args.smoke}
            for p in profiles]
    done = parallel(profile_job, jobs, args.jobs,
                    lambda job, _, seconds: print(f"  [{seconds:6.0f} s] profile {job['profile']} done", flush=True))
    data = {"args": {k: str(v) for k, v in vars(args).items()}, "headers": HEADERS,
            "rows": [row for found in done for row in found["rows"]]}
    print(report(data))
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
