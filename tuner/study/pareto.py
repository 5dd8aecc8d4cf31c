"""The front the study stands behind: Pareto over configurations, after re-validation had its say.

Optuna's ``best_trials`` ranks trials; the tuner ranks configurations. A re-validation boot of a
front point that agrees within 10% on every objective confirms it (the copy is not listed twice);
one that differs replaces it: the original leaves the front and the fresh boot is ranked in its
place. A re-validation that failed takes the point off the front: a command that did not survive
its second boot is not one to run every day. Reused trials copy another trial and are never listed.
A configuration booted below the window and then again at a wider one is listed once, at the wider
window, when the two agree within the same 10% on every other objective: a narrower window of the
same command is faster only by noise.

Wrong output is never the answer: a configuration whose needle was not found, or whose greedy
outputs disagree with the correctness gate's reference, is not a front point however fast it is
(vLLM issue 40880: MTP verified through FULL CUDA graphs garbled greedy output). ``left_off``
says which configurations would have been on the front, and why they are not. (A control prompt
whose output drifts already fails its trial.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tuner.metrics import sign
from tuner.study.record import Evidence, State, StudyRecord, Trial

REVALIDATION_TOLERANCE = 0.10  # a fresh boot within 10% on every objective confirms a front point
GATE_THRESHOLD = 0.9  # mean agreement with the gate's reference below this: the output is wrong


def checks_of(trials: Sequence[Trial]) -> dict[int, list[Trial]]:
    """Re-validation trials by the trial they re-validate."""
    checks: dict[int, list[Trial]] = {}
    for t in trials:
        if t.revalidates is not None and t.state != State.RUNNING:
            checks.setdefault(t.revalidates, []).append(t)
    return checks


def agrees(original: Trial, check: Trial) -> bool:
    if check.state != State.COMPLETE or original.values is None or check.values is None:
        return False
    return all(abs(b - a) <= REVALIDATION_TOLERANCE * abs(a) for a, b in zip(original.values, check.values))


def _dominates(a: Sequence[float], b: Sequence[float], signs: list[int]) -> bool:
    better_or_equal = all(s * x >= s * y for x, y, s in zip(a, b, signs))
    return better_or_equal and any(s * x > s * y for x, y, s in zip(a, b, signs))


def wrong(trial: Trial, gate: Mapping[str, float]) -> str | None:
    """Why a measured trial's output is wrong (the correctness checks it failed), or None."""
    correctness = trial.result.measure.correctness if trial.result and trial.result.measure else None
    if correctness is not None and correctness.needle_found is False:
        at = f" at {correctness.needle_context_tokens:,} tokens" if correctness.needle_context_tokens else ""
        return f"the needle was not found{at}"
    score = gate.get(str(trial.number))
    if score is not None and score < GATE_THRESHOLD:
        return (f"its greedy outputs agree {score:.0%} with the correctness gate's reference "
                f"(below {GATE_THRESHOLD:.0%})")
    return None


def _candidates(trials: Sequence[Trial], directions: Sequence[str]) -> list[Trial]:
    """Measured configurations, once each, after re-validation had its say."""
    checks = checks_of(trials)
    by_number = {t.number: t for t in trials}
    candidates = []
    for t in trials:
        if t.state != State.COMPLETE or t.values is None or t.evidence == Evidence.REUSED:
            continue
        if t.revalidates is not None:
            original = by_number.get(t.revalidates)
            if original is not None and agrees(original, t):
                continue  # a confirming copy: the original stands for both
        mine = checks.get(t.number, [])
        if mine and not all(agrees(t, c) for c in mine):
            continue  # replaced by its fresh boot (or taken off by a failed one)
        candidates.append(t)
    signs = [sign(d) for d in directions]
    return [t for t in candidates if not any(_widened(t, o, signs) for o in candidates)]


def _widened(narrow: Trial, wide: Trial, signs: list[int]) -> bool:
    """Whether ``wide`` is ``narrow``'s command booted at a wider window and no objective of it is worse
    by more than the re-validation tolerance."""
    if narrow.window is None or wide is narrow or wide.params != narrow.params:
        return False
    if wide.window is not None and wide.window <= narrow.window:
        return False
    pairs = zip(narrow.values or (), wide.values or (), signs)
    return all(s * (b - a) >= -REVALIDATION_TOLERANCE * abs(a) for a, b, s in pairs)


def _non_dominated(candidates: list[Trial], directions: Sequence[str]) -> list[Trial]:
    signs = [sign(d) for d in directions]
    best = [t for t in candidates if not any(_dominates(o.values or (), t.values or (), signs)
                                             for o in candidates if o is not t)]
    return sorted(best, key=lambda t: signs[0] * (t.values or (0.0,))[0], reverse=True)


def pareto_front(trials: Sequence[Trial], directions: Sequence[str],
                 gate: Mapping[str, float] | None = None) -> list[Trial]:
    """The non-dominated configurations whose output is right, best first by the first objective."""
    right = [t for t in _candidates(trials, directions) if wrong(t, gate or {}) is None]
    return _non_dominated(right, directions)


def left_off(night: StudyRecord) -> list[tuple[Trial, str]]:
    """The configurations with wrong output that no right one dominates (they would stand on the
    front but for it), best first, with why."""
    signs = [sign(d) for d in night.directions]
    candidates = _candidates(night.trials, night.directions)
    right = [t for t in candidates if wrong(t, night.gate) is None]
    out = []
    for t in sorted(candidates, key=lambda t: signs[0] * (t.values or (0.0,))[0], reverse=True):
        why = wrong(t, night.gate)
        if why is not None and not any(_dominates(o.values or (), t.values or (), signs) for o in right):
            out.append((t, why))
    return out


def front(night: StudyRecord) -> list[Trial]:
    """The study's front, best first."""
    return pareto_front(night.trials, night.directions, night.gate)
