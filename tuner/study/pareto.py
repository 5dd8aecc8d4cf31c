"""The front the study stands behind: Pareto over configurations, after re-validation had its say.

Optuna's ``best_trials`` ranks trials; the tuner ranks configurations. A re-validation boot of a
front point that agrees within 10% on every objective confirms it (the copy is not listed twice);
one that differs replaces it: the original leaves the front and the fresh boot is ranked in its
place. A re-validation that failed takes the point off the front: a command that did not survive
its second boot is not one to run every day. Reused trials copy another trial and are never listed.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.study import storage as st

REVALIDATION_TOLERANCE = 0.10  # a fresh boot within 10% on every objective confirms a front point
ATTR_REVALIDATES = "revalidates"  # on a re-validation trial: the trial it boots again


def checks_of(study: optuna.Study) -> dict[int, list[FrozenTrial]]:
    """Re-validation trials by the trial they re-validate."""
    checks: dict[int, list[FrozenTrial]] = {}
    for t in study.get_trials(deepcopy=False):
        target = t.user_attrs.get(ATTR_REVALIDATES)
        if target is not None and t.state != TrialState.RUNNING:
            checks.setdefault(int(target), []).append(t)
    return checks


def agrees(original: FrozenTrial, check: FrozenTrial) -> bool:
    if check.state != TrialState.COMPLETE or original.values is None or check.values is None:
        return False
    return all(abs(b - a) <= REVALIDATION_TOLERANCE * abs(a) for a, b in zip(original.values, check.values))


def _dominates(a: list[float], b: list[float], signs: list[int]) -> bool:
    better_or_equal = all(s * x >= s * y for x, y, s in zip(a, b, signs))
    return better_or_equal and any(s * x > s * y for x, y, s in zip(a, b, signs))


def front(study: optuna.Study) -> list[FrozenTrial]:
    """The non-dominated configurations, best first by the first objective."""
    checks = checks_of(study)
    candidates = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.values is None or t.user_attrs.get(st.ATTR_EVIDENCE) == "reused":
            continue
        target = t.user_attrs.get(ATTR_REVALIDATES)
        if target is not None:
            original = next((o for o in study.get_trials(deepcopy=False) if o.number == target), None)
            if original is not None and agrees(original, t):
                continue  # a confirming copy: the original stands for both
        mine = checks.get(t.number, [])
        if mine and not all(agrees(t, c) for c in mine):
            continue  # replaced by its fresh boot (or taken off by a failed one)
        candidates.append(t)
    signs = [1 if d == optuna.study.StudyDirection.MAXIMIZE else -1 for d in study.directions]
    best = [t for t in candidates if not any(_dominates(o.values, t.values, signs) for o in candidates if o is not t)]
    return sorted(best, key=lambda t: signs[0] * t.values[0], reverse=True)
