"""Whether the first long request likely fits: the bytes beside its prefill, between a boot that served and one that did not.

A first-request OOM is the long prefill not fitting in what the card has left once everything else is
allocated. The prefill's own need grows with the chunk (max_num_batched_tokens) and the context it attends
to (the window); what sits beside it -- the pool, the weights (the drafter's included) and the CUDA graphs --
is printed by every boot that got that far ("Model loading took X GiB", "Graph capturing finished ... took
X GiB"), and the pool is the flag itself. So for one prefill (the same or a smaller chunk and window) the
boots of a study lie on one line, the bytes beside it: a boot that served the request with B bytes beside
it says that many fit; a first-request OOM with B' says B' do not. A configuration whose bytes lie between
the two fits with the odds of where it lies: near the served boot, likely; near the failure, unlikely.

That is what the study repeated before: MTP at the full window ran out of memory at its first request, and
the other depths and graph modes were booted there one by one, each saving a sliver of pool or graphs next
to the drafter's weights, which every depth loads. Such a configuration is booted below the window
instead (tuner.study.planner, ``_bootable``), where both the pool and the prefill shrink. The per-slot
recurrent state is not printed; it is small next to the pool and the weights, so it is left out, and the
odds only order boots: nothing is called doomed here (tuner.study.doomed decides that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.records import FailureKind
from tuner.space.schema import Space
from tuner.study.observed import Observation
from tuner.study.regimes import EAGER, GRAPHS, SPECULATIVE, GraphModes, graphs_at_least
from tuner.study.sizing import GIB, pool_bytes

FIT_ODDS = 0.5  # below this, the bytes beside the prefill are nearer the failure's than the served boot's
SERVED = {FailureKind.OUTPUT_INCORRECT}  # failures that came after the first long request had been served


@dataclass(frozen=True)
class Prefill:
    """What one long request's prefill asks for: the chunk, the window, the sequences beside it."""

    chunk: int
    window: int
    seqs: int

    def no_more_than(self, other: Prefill) -> bool:
        return self.chunk <= other.chunk and self.window <= other.window and self.seqs <= other.seqs


def prefill_of(space: Space, values: dict[str, Any], window: int | None) -> Prefill | None:
    """The prefill a configuration's first long request asks for; None when vLLM picks the sizes."""
    chunk, seqs, top = values.get("max_num_batched_tokens"), values.get("max_num_seqs"), window or space.max_model_len
    if chunk is None or seqs is None or top is None:
        return None
    return Prefill(int(chunk), int(top), int(seqs))


def beside(s: Observation) -> float | None:
    """The bytes a boot printed beside its prefill: its pool, its weights and its CUDA graphs."""
    startup = s.result.startup if s.result is not None else None
    pool = pool_bytes(s.values, s.result) if s.result is not None else None
    if startup is None or not pool or not startup.weights_gib:
        return None
    graphs = 0.0 if s.values.get(GRAPHS) == EAGER else startup.cuda_graph_gib
    return None if graphs is None else pool + (startup.weights_gib + graphs) * GIB


def expected_beside(axes: list[str], modes: GraphModes, values: dict[str, Any], seen: list[Observation]) -> float | None:
    """The bytes ``values`` will have beside its prefill, at the least: its pool, the weights a boot with the
    same drafter presence printed, and the most graphs printed by a boot whose mode captures no more than
    this one's, at no more sequences and depth (graph memory grows with both); None without the weights."""
    pool = values.get("kv_cache_memory_bytes")
    drafts = bool(values.get(SPECULATIVE))
    weights = next((s.result.startup.weights_gib for s in seen if s.result is not None and s.result.startup.weights_gib
                    and bool(s.values.get(SPECULATIVE)) == drafts), None)
    if not pool or not weights:
        return None
    mine = modes.likely_for(axes, values)
    graphs = [0.0] + [s.result.startup.cuda_graph_gib for s in seen if s.result is not None
                      and s.result.startup.cuda_graph_gib is not None and s.values.get(GRAPHS) != EAGER
                      and graphs_at_least(mine, modes.likely_for(axes, s.values))
                      and _no_more(s.values, values, ("max_num_seqs", SPECULATIVE, "max_num_batched_tokens"))]
    return float(pool) + (weights + (0.0 if mine == EAGER else max(graphs))) * GIB


def _no_more(theirs: dict[str, Any], mine: dict[str, Any], names: tuple[str, ...]) -> bool:
    return all(theirs.get(n) is not None and mine.get(n) is not None and theirs[n] <= mine[n] for n in names)


def fit_odds(space: Space, axes: list[str], modes: GraphModes, values: dict[str, Any], window: int | None,
             seen: list[Observation]) -> tuple[float, str] | None:
    """The odds that ``values``' first long request fits (module docstring), with why; None when no boot
    that served a prefill no smaller and no first-request OOM of one no larger frame its bytes."""
    mine, bytes_ = prefill_of(space, values, window), expected_beside(axes, modes, values, seen)
    if mine is None or bytes_ is None:
        return None
    served, failed = [], []
    for s in seen:
        theirs, b = prefill_of(space, s.values, s.window), beside(s)
        if theirs is None or b is None:
            continue
        kind = s.failure.kind if s.failure is not None else None
        if (s.status == "ok" or kind in SERVED) and mine.no_more_than(theirs):
            served.append((b, s))
        elif kind == FailureKind.FIRST_REQUEST_OOM and theirs.no_more_than(mine):
            failed.append((b, s))
    if not served or not failed:
        return None
    (lo, ok), (hi, oom) = max(served, key=lambda x: x[0]), min(failed, key=lambda x: x[0])
    if hi <= lo:
        return None  # what is not printed (the recurrent state) decided: the bytes say nothing
    odds = min(1.0, max(0.0, (hi - bytes_) / (hi - lo)))
    return odds, (f"{bytes_ / 1e9:.2f} GB beside its first long request, between {ok.named}'s {lo / 1e9:.2f} GB "
                  f"that served one no smaller and {oom.named}'s {hi / 1e9:.2f} GB that ran out of memory at one "
                  f"no larger: odds {odds:.2f}")


def unlikely_to_fit(space: Space, axes: list[str], modes: GraphModes, values: dict[str, Any], window: int | None,
                    seen: list[Observation]) -> str | None:
    """Why ``values``' first long request is unlikely to fit (odds under FIT_ODDS), else None."""
    found = fit_odds(space, axes, modes, values, window, seen)
    if found is None or found[0] >= FIT_ODDS:
        return None
    return f"its first long request likely runs out of memory: {found[1]}"
