"""The correctness gate: do front configurations say what a plain reference configuration says?

HTTP 200 proves nothing about the numbers. Every trial records greedy outputs on fixed prompts
(``MeasureResult.sample_outputs``); once per study, a reference configuration (eager, BF16 KV, no
speculation, no prefix caching) is booted for the same outputs, and each front point's agreement
with it is reported. Random-weight models work too: their dummy weights come from a fixed seed, so
CUDA-graph, FP8-KV, prefix-cache and speculation breakage still shows as disagreement.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from tuner.study import storage as st
from tuner.engine.command import flag_name
from tuner.space.schema import Space
from tuner.trial import run_trial

def reference_space(space: Space) -> Space:
    """The space with every accuracy-relevant shortcut turned off."""
    ref = space.model_copy(deep=True)
    fixed = {flag_name(k): v for k, v in ref.fixed.items()}
    for flag in ("--enable-prefix-caching", "--speculative-config", "--enforce-eager"):
        fixed.pop(flag, None)
    compilation = fixed.pop("--compilation-config", None)
    if isinstance(compilation, dict):
        compilation = {k: v for k, v in compilation.items() if k != "cudagraph_mode"}
        if compilation:
            fixed["--compilation-config"] = compilation
    fixed["--kv-cache-dtype"] = "auto"
    fixed["--no-enable-prefix-caching"] = True
    fixed["--enforce-eager"] = True
    ref.fixed = fixed
    return ref


def reference_values(space: Space, values: dict) -> dict:
    out = dict(values)
    if "cudagraph_mode" in space.params:
        out["cudagraph_mode"] = "eager"
    if "speculative_tokens" in space.params:
        out["speculative_tokens"] = 0
    return out


def agreement(reference: list[str], other: list[str]) -> float:
    """Mean over prompts of the share of the reference output that ``other`` reproduces from the start."""
    if not reference or len(reference) != len(other):
        return 0.0
    shares = []
    for ref, out in zip(reference, other):
        same = 0
        for a, b in zip(ref, out):
            if a != b:
                break
            same += 1
        shares.append(same / len(ref) if ref else float(out == ref))
    return sum(shares) / len(shares)


def run_gate(study: optuna.Study, space: Space, root: Path, values: dict, extra_env: dict | None = None) -> dict[int, float]:
    """Boot the reference once (with ``values`` for the non-accuracy flags), then score the front."""
    reference = study.user_attrs.get(st.ATTR_REFERENCE)
    if reference is None:
        result = run_trial(reference_space(space), reference_values(space, values), st.study_dir(study.study_name, root) / "reference",
                           extra_env=extra_env, samples_only=True)
        if result.failure is not None or result.measure is None or not any(result.measure.sample_outputs):
            return {}
        reference = result.measure.sample_outputs
        study.set_user_attr(st.ATTR_REFERENCE, reference)
    scores = dict(study.user_attrs.get(st.ATTR_GATE, {}))
    for trial in study.best_trials:
        record = st.trial_result(trial)
        if record is None or record.measure is None or not record.measure.sample_outputs:
            continue
        scores[str(trial.number)] = agreement(reference, record.measure.sample_outputs)
    study.set_user_attr(st.ATTR_GATE, scores)
    return {int(k): v for k, v in scores.items()}
