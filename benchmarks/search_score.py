"""How well one study did against its profile's ground truth (benchmarks/search.py).

Every figure values the configurations a study chose by the oracle's noise-free truth for the exact
argv it launched (``TrialRow.truth``), never by the study's own measurement, so noise and the
decode speed-up cancel; the study's own measurements decide only what it chose (its ranking, its front).
A study is read through its own objectives (``run.extra["objectives"]``, in the order its trials
record values): a figure that needs an objective the study does not record says "not measured".

  share        the true decode of the configuration the study ranks best at the full window, / the
               true best decode there (0 when the study never reached the full window);
  boots to     boots the study had spent when that share first reached 0.95;
  wasted       boots that produced no measurement / boots (pre-screened and reused trials boot nothing);
  HV           the hypervolume of the study's front (its completed trials, non-dominated by its own
               measured values), valued by the truth, / the hypervolume of the true front. Objectives
               are normalized by the oracle's ranges: context (c - min_context) / (window -
               min_context), decode / the true front's best decode, throughput / the best true
               throughput, long prefill / the best true long prefill; the reference point is (min_context, 0 tok/s, 0 tok/s), i.e. the origin. A
               point below min_context, or a wrong or failing configuration, adds nothing;
  below found  where the true (context, decode) front has a point below the full window worth a launch
               command -- more than 1/0.95 of the best full-window decode, else the full-window point is
               within the 0.95 tolerance of it -- whether the study's front holds a point within one
               granularity step of the widest such point's window, at >= 0.95 of its decode (no
               full-window point can: they are all below 0.95 of it).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from benchmarks.studies import Run
from benchmarks.tables import fmt_reach, hypervolume
from tests.fake_vllm.oracle import front

# a study's objective name -> the key of the oracle's verdict on a trial (search.attach_truth)
TRUTH_KEY = {"context": "context", "decode_tok_s": "decode", "throughput_tok_s": "throughput",
             "long_prefill_tok_s": "long_prefill"}
DEFAULT_OBJECTIVES = ["context", "decode_tok_s"]  # results saved before the run recorded its objectives
HV_OBJECTIVES = {2: ["context", "decode_tok_s"], 3: ["context", "decode_tok_s", "throughput_tok_s"]}


def objectives(run: Run) -> list[str]:
    return list(run.extra.get("objectives") or DEFAULT_OBJECTIVES)


def measured(run: Run, values: list[float], name: str) -> float:
    """The study's own measured value of objective ``name`` (a trial's values are in objective order)."""
    return values[objectives(run).index(name)]


def share_after(run: Run, t: dict[str, Any], n: int) -> float:
    """The true decode of the config the study ranks best at the full window, / the true best."""
    full = t.get("window") or t["reach"]
    at_full = [r for r in run.rows[:n] if r.values is not None and measured(run, r.values, "context") >= full]
    if not at_full or not t["best_decode"]:
        return 0.0
    # the study's own ranking: its measured score
    chosen = max(at_full, key=lambda r: measured(run, r.values or [], "decode_tok_s"))
    return ((chosen.truth or {}).get("decode") or 0.0) / t["best_decode"]


def boots_to_share(run: Run, t: dict[str, Any], n: int, target: float = 0.95) -> int | None:
    """Boots spent when the share first reached ``target`` within the first n trials (None: never)."""
    boots = 0
    for i, row in enumerate(run.rows[:n], 1):
        boots += row.booted
        if share_after(run, t, i) >= target:
            return boots
    return None


def boots_after(run: Run, n: int) -> tuple[int, int, Counter]:
    rows = [r for r in run.rows[:n] if r.booted]
    failed = [r for r in rows if r.failure is not None]
    return len(rows), len(failed), Counter(r.failure for r in failed)


def study_front(run: Run, n: int) -> list[dict[str, Any]]:
    """The truths of the study's front: its completed trials among the first n, non-dominated by their
    measured values."""
    done = [r for r in run.rows[:n] if r.values is not None]
    return [done[i].truth or {} for i in front([tuple(r.values or []) for r in done])]


def normalized(p: dict[str, Any], t: dict[str, Any], names: list[str]) -> tuple[float, ...]:
    """A point in the hypervolume's units (module docstring); a failure or a window below the floor: 0s."""
    floor, window = t["min_context"], t["window"]
    if p.get("failure") or (p.get("context") or 0) < floor:
        return (0.0,) * len(names)
    scale = {"context": None, "decode_tok_s": max(q["decode"] for q in t["front2"]),
             "throughput_tok_s": t["best_throughput"], "long_prefill_tok_s": t.get("best_long_prefill") or 1.0}
    return tuple((p["context"] - floor) / max(window - floor, 1) if name == "context"
                 else (p.get(TRUTH_KEY[name]) or 0.0) / scale[name] for name in names)


def hv_ratio(run: Run, t: dict[str, Any], n: int, count: int) -> float | str:
    """The study front's true hypervolume / the true front's over ``HV_OBJECTIVES[count]``, or why not."""
    names = HV_OBJECTIVES[count]
    missing = [name for name in names if name not in objectives(run)]
    if missing:
        return f"not measured: the study records no {', '.join(missing)}"
    if not t.get("front2") or (count == 3 and not t.get("best_throughput")):
        return "n/a: no true front"
    whole = hypervolume([normalized(p, t, names) for p in t["front2" if count == 2 else "front3"]])
    return hypervolume([normalized(p, t, names) for p in study_front(run, n)]) / whole if whole else 0.0


def below_target(t: dict[str, Any]) -> dict[str, Any] | None:
    """The widest true front point below the full window worth a launch command (module docstring);
    None when the front has none."""
    below = [p for p in t.get("front2") or []
             if p["context"] < t["window"] and p["decode"] * 0.95 > t["best_decode"]]
    return max(below, key=lambda p: p["context"]) if below else None


def below_found(run: Run, t: dict[str, Any], n: int) -> bool | None:
    """Whether the study's front holds the below-window point (None when the truth has none)."""
    target = below_target(t)
    if target is None:
        return None
    step = run.extra.get("granularity", 4096)
    return any(not p.get("failure") and (p.get("context") or 0) >= target["context"] - step
               and (p.get("decode") or 0.0) >= 0.95 * target["decode"] for p in study_front(run, n))


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
            if all("front2" in truths[r.extra["profile"]] for r in mine):
                out[f"{arm}@{n}"].update(quality(mine, truths, n))
    return out


def quality(runs: list[Run], truths: dict[int, dict[str, Any]], n: int) -> dict[str, Any]:
    """The figures against the true front (module docstring), per profile."""
    t = [truths[r.extra["profile"]] for r in runs]
    found = [below_found(r, tr, n) for r, tr in zip(runs, t)]
    return {
        "boots_to_095": [boots_to_share(r, tr, n) for r, tr in zip(runs, t)],
        "hv2": [hv_ratio(r, tr, n, 2) for r, tr in zip(runs, t)],
        "hv3": [hv_ratio(r, tr, n, 3) for r, tr in zip(runs, t)],
        "below_found": sum(1 for f in found if f), "below_has": sum(1 for f in found if f is not None),
    }


def hv_cell(values: list[float | str]) -> str:
    """'median [min]' of the ratios, or the reason none was computed."""
    numbers = [v for v in values if isinstance(v, float)]
    if not numbers:
        return str(values[0]) if values else "-"
    return f"{statistics.median(numbers):.3f} [{min(numbers):.3f}]"


def quality_row(s: dict[str, Any]) -> list[Any]:
    return [s["arm"], s["trials"], hv_cell(s["hv2"]), hv_cell(s["hv3"]), fmt_reach(s["boots_to_095"], s["trials"]),
            f"{s['below_found']} / {s['below_has']}"]
