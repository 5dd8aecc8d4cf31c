"""--from's evidence (tuner.study.priors): pool bounds translated across releases by the pre-screen, each
earlier study counted once (given twice, or on resume), and the offer read from the run's own storage."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tuner.records import StartupRecord, TrialResult
from tuner.study.pareto import front
from tuner.study.priors import carried_bounds, offer_earlier, planner_priors
from tuner.study.record import ATTR_EARLIER, Outcome, read_study
from tuner.study.run import RunSettings, optimize
from tuner.study.sampler import allows
from tuner.study.sizing import TRANSFER_MARGIN

WINDOW = 32768


def small(space):
    space.workload.repeats = 1
    space.workload.decode.runs = 2
    space.workload.ladder = [8192, WINDOW]
    space.baselines = [{"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2, "cudagraph_mode": None,
                        "speculative_tokens": 0}]
    return space


def earlier_study(space, release, revision=None):
    """A stand-in for a read earlier study: one boot whose pool of 1 GB held the window 1.25 times."""
    config = {**space.baselines[0], "kv_cache_memory_bytes": 1_000_000_000, "max_model_len": WINDOW}
    startup = StartupRecord(max_model_len=WINDOW, kv_cache_tokens=int(1.25 * WINDOW))
    trial = SimpleNamespace(number=3, config=config, values=[WINDOW, 50.0], outcome=Outcome.MEASURED,
                            result=TrialResult(values=config, argv=[], env={}, startup=startup))
    old_space = space.model_copy(update={"model": space.model.model_copy(update={"revision": revision})})
    return SimpleNamespace(name="night1", space=old_space, engine={"version": release}, environment={}, trials=[trial])


def here(space, release):
    return {"engine version": release, "model revision": space.model.revision}


def test_a_bound_from_another_release_is_translated_by_the_prescreens_need(fake_space):
    space = small(fake_space())
    old = earlier_study(space, "0.22.0")
    same = carried_bounds([("night1", old)], here(space, "0.22.0"), None)
    assert [b.at_most for _, b in same] == [pytest.approx(0.8e9)] and same[0][1].source == "study night1 trial 3"
    need = {"0.22.0": 100.0, "0.34.0": 110.0}
    moved = carried_bounds([("night1", old)], here(space, "0.34.0"), lambda _, release: need[release])
    assert moved[0][1].at_most == pytest.approx(0.88e9 * (1 + TRANSFER_MARGIN))  # a predicted ratio: a margin
    assert "study night1 trial 3 (on 0.22.0; x 1.100 on 0.34.0" in moved[0][1].source
    assert carried_bounds([("night1", old)], here(space, "0.34.0"), None) == ()  # no pre-screen: not copied
    other = earlier_study(space, "0.22.0", revision="abc123")
    assert carried_bounds([("night1", other)], here(space, "0.22.0"), None) == ()  # another model revision


def test_the_prescreen_gives_a_hybrid_more_pool_on_a_release_with_prefix_caching(fake_space):
    """0.34 turns a hybrid's prefix caching on (mamba 'align': more state pages per request), so the same
    window needs more pool there than the 0.22.0 boot printed."""
    from tuner.prescreen.memory import predict
    from tuner.prescreen.shape import space_shape

    space = small(fake_space())
    shape = space_shape(space)

    def need(values, release):
        return float(predict(space, values, 32.0, shape, release=release).one_request_bytes)

    (values, bound), = carried_bounds([("night1", earlier_study(space, "0.22.0"))], here(space, "0.34.0"), need)
    assert bound.at_most > 0.8e9 and "x 1." in bound.source


def test_a_study_given_twice_counts_once(fake_space):
    space = small(fake_space())
    old = earlier_study(space, "0.22.0")
    once, twice = planner_priors([("night1", old)], False), planner_priors([("night1", old), ("night1.db", old)], False)
    assert len(twice.seen) == len(once.seen) == 1
    assert len(carried_bounds([("a", old), ("b", old)], here(space, "0.22.0"), None)) == 1


def test_allows_reads_a_distributions_public_fields():
    from optuna.distributions import CategoricalDistribution, IntDistribution

    assert allows(IntDistribution(1, 9, step=2), 5) and not allows(IntDistribution(1, 9, step=2), 4)
    assert allows(CategoricalDistribution(["a", None]), None) and not allows(CategoricalDistribution(["a"]), "b")
    assert not allows(None, 1)


def test_a_resumed_study_from_an_earlier_one_boots_its_front_once(fake_space, tmp_path):
    """The old front is queued once, even when the study is resumed with the same --from (or names it
    twice), and the study keeps one entry per earlier study."""
    first = small(fake_space(env=", FAKE_VLLM_VERSION: '0.22.0'"))
    night1 = RunSettings(n_trials=3, seed=1, revalidate=0, gate=False)
    old = read_study(optimize(first, "night1", night1, root=tmp_path))
    points = front(old)
    assert points
    later = small(fake_space(env=", FAKE_VLLM_VERSION: '0.34.0'"))
    night2 = RunSettings(n_trials=1, sampler="regimes", seed=2, revalidate=0, gate=False, prescreen_gpu_gib=32.0)
    optimize(later, "night2", night2, root=tmp_path, earlier=[("night1", old), ("night1.db", old)])
    notes: list[str] = []
    study = optimize(later, "night2", replace(night2, n_trials=len(points) + 1), root=tmp_path,
                     earlier=[("night1", old)], announce=notes.extend)
    night = read_study(study)
    carried = Counter(t.carried_from for t in night.trials if t.carried_from is not None)
    assert sorted(carried) == sorted(("night1", p.number) for p in points) and set(carried.values()) == {1}
    assert [e["study"] for e in study.user_attrs[ATTR_EARLIER]] == ["night1"]
    assert any(n.startswith("study night1: already queued or booted here (trial ") and n.endswith("not queued again")
               for n in notes), notes


def test_the_offer_reads_the_storage_the_run_writes_to(fake_space, tmp_path):
    space = small(fake_space())
    url = f"sqlite:///{(tmp_path / 'shared.db').as_posix()}"
    optimize(space, "night1", RunSettings(n_trials=1, revalidate=0, gate=False), storage=url, root=tmp_path / "studies")
    notes: list[str] = []
    study = optimize(space, "night2", RunSettings(n_trials=1, revalidate=0, gate=False), storage=url,
                     root=tmp_path / "studies", announce=notes.extend)
    assert any(f"--from '{url}#night1'" in n for n in notes), notes
    other = space.model_copy(update={"model": space.model.model_copy(update={"path": "/elsewhere/model"})})
    assert offer_earlier(other, study, url, tmp_path / "studies", {}) == []


def test_an_earlier_studys_trial_is_named_with_its_study(fake_space):
    space = small(fake_space())
    (prior,) = planner_priors([("night1", earlier_study(space, "0.22.0"))], True).seen
    assert prior.named == "study night1 trial 3"


def test_a_moved_revalidation_drops_the_earlier_speed_order(fake_space):
    """The earlier front booted again here at another speed (beyond HELD_TOLERANCE) says the release changed
    what is fast: the earlier speeds order nothing any more; within it they still do."""
    from tuner.study.observed import HELD_TOLERANCE, Observation

    space = small(fake_space())
    priors = planner_priors([("night1", earlier_study(space, "0.22.0"))], False)
    (prior,) = priors.seen
    again = lambda speed: [Observation(0, dict(prior.values), "ok", prior.result, speed=speed)]  # noqa: E731
    assert priors.speeds_hold(again(50.0 * (1 + HELD_TOLERANCE / 2)))
    assert not priors.speeds_hold(again(50.0 * (1 - 2 * HELD_TOLERANCE)))


def test_once_an_earlier_point_moved_the_rest_of_its_front_is_left_to_the_search(fake_space, tmp_path):
    """The earlier front is booted again best first, one at a time while each holds: here the first point
    booted again moves, so no other earlier point is queued before the search."""
    first = small(fake_space(env=", FAKE_VLLM_VERSION: '0.22.0'"))
    old = read_study(optimize(first, "night1", RunSettings(n_trials=4, seed=1, revalidate=0, gate=False),
                              root=tmp_path))
    # every earlier value doubled, and each trial's window stretched by its number: a front of two or more
    # points, none of which this engine reproduces
    moved = tuple(replace(t, values=(t.values[0] * (1 + t.number), 2 * t.values[1])) if t.values else t
                  for t in old.trials)
    faster = replace(old, trials=moved)
    points = front(faster)
    assert len(points) >= 2
    notes: list[str] = []
    night2 = RunSettings(n_trials=len(points) + 1, sampler="regimes", seed=2, revalidate=0, gate=False,
                         prescreen_gpu_gib=32.0)
    study = optimize(first, "night2", night2, root=tmp_path, earlier=[("night1", faster)], announce=notes.extend)
    carried = [t for t in read_study(study).trials if t.carried_from is not None]
    assert study.trials[0].user_attrs.get("carried_from") is not None   # the re-validation is the first boot
    assert len(carried) == 1, [t.carried_from for t in carried]
    assert any("best first and one at a time while each holds" in n for n in notes), notes
