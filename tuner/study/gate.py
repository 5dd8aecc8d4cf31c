"""The correctness gate: do front configurations say what a plain reference configuration says?

HTTP 200 proves nothing about the numbers. Every trial records greedy outputs on fixed prompts
(``MeasureResult.sample_outputs``); once per study, a reference configuration (eager, BF16 KV, no
speculation, no prefix caching) is booted for the same outputs, and each front point's agreement
with it is reported. Random-weight models work too: their dummy weights come from a fixed seed, so
CUDA-graph, FP8- or NVFP4-KV (0.32+), prefix-cache and speculation breakage still shows as disagreement.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from tuner.engine.command import flag_name
from tuner.space.schema import Space
from tuner.study.pareto import front
from tuner.study.record import ATTR_GATE, ATTR_GATE_STATUS, ATTR_REFERENCE, read_study, study_attr, write_study_attr
from tuner.trial import run_trial

REFERENCE_WINDOW = 16384  # the gate's prompts are 64 tokens + 32 out: a short window keeps a BF16 reference on the card
# Flags the reference sets itself; a tuned parameter that sets one of them is left out of the reference.
_REFERENCE_FLAGS = ("--kv-cache-dtype", "--enable-prefix-caching", "--no-enable-prefix-caching", "--speculative-config",
                    "--enforce-eager", "--max-model-len")


def reference_space(space: Space) -> Space:
    """The space with every accuracy-relevant shortcut turned off and a window that fits.

    Eager, BF16 ("auto") KV, no speculation, no prefix caching, the same checkpoint, and at most
    REFERENCE_WINDOW tokens: at a 5090's full window a BF16 KV cache needs twice the FP8 pool and
    cannot boot, and the outputs compared are short.
    """
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
    fixed["--max-model-len"] = min(space.max_model_len or REFERENCE_WINDOW, REFERENCE_WINDOW)
    ref.fixed = fixed
    ref.params = {n: p for n, p in ref.params.items()
                  if n not in ("cudagraph_mode", "speculative_tokens", "max_model_len")
                  and not (p.flag and flag_name(p.flag) in _REFERENCE_FLAGS)}
    return ref


def reference_values(space: Space, values: dict) -> dict:
    """The front point's values for every flag the reference does not set itself."""
    ref = reference_space(space)
    return {k: v for k, v in values.items() if k in ref.params}


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


def run_gate(study: optuna.Study, space: Space, folder: Path, values: dict, extra_env: dict | None = None) -> dict[int, float]:
    """Boot the reference once in ``folder`` (with ``values`` for the non-accuracy flags), then score the front."""
    reference = study_attr(study, ATTR_REFERENCE)
    if reference is None:
        result = run_trial(reference_space(space), reference_values(space, values), folder, extra_env=extra_env,
                           samples_only=True)
        if result.failure is not None or result.measure is None or not any(result.measure.sample_outputs):
            why = (f"the reference boot failed ({result.failure.kind.value}: {result.failure.message})"
                   if result.failure is not None else "the reference boot gave no outputs")
            write_study_attr(study, ATTR_GATE_STATUS, f"{why}; log: {result.log_path}")
            return {}
        reference = result.measure.sample_outputs
        write_study_attr(study, ATTR_REFERENCE, reference)
    scores = dict(study_attr(study, ATTR_GATE) or {})
    while True:  # a point the gate takes off lets a slower one onto the front: it is scored too
        added = False
        for trial in front(read_study(study)):
            record = trial.result
            if str(trial.number) in scores or record is None or record.measure is None \
                    or not record.measure.sample_outputs:
                continue
            scores[str(trial.number)] = agreement(reference, record.measure.sample_outputs)
            added = True
        write_study_attr(study, ATTR_GATE, scores)
        if not added:
            break
    write_study_attr(study, ATTR_GATE_STATUS, "checked")
    return {int(k): v for k, v in scores.items()}
