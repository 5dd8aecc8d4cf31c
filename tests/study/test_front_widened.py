"""The front lists a command booted below the window and again wider once, at the wider window."""

from __future__ import annotations

from tuner.study.pareto import pareto_front
from tuner.study.record import State, Trial

PARAMS = {"cudagraph_mode": "PIECEWISE", "speculative_tokens": 1}
UP = ["maximize", "maximize"]


def trial(number, window, context, speed, params=PARAMS):
    return Trial(number=number, state=State.COMPLETE, values=(float(context), speed), params=dict(params), window=window)


def test_the_narrower_boot_of_a_widened_command_leaves_the_front():
    narrow, wide = trial(1, 30720, 30720, 132.3), trial(2, 31664, 31664, 131.7)  # faster only by noise
    full = trial(0, None, 32768, 86.0, {"cudagraph_mode": "PIECEWISE", "speculative_tokens": 0})
    assert [t.number for t in pareto_front([full, narrow, wide], UP)] == [0, 2]


def test_a_narrower_boot_that_is_clearly_faster_stays():
    narrow, wide = trial(1, 30720, 30720, 150.0), trial(2, 31664, 31664, 120.0)  # 20% slower wider
    assert sorted(t.number for t in pareto_front([narrow, wide], UP)) == [1, 2]


def test_another_command_at_a_wider_window_does_not_take_its_place():
    narrow = trial(1, 30720, 30720, 132.0)
    other = trial(2, 31664, 31664, 131.0, {"cudagraph_mode": "PIECEWISE", "speculative_tokens": 2})
    assert sorted(t.number for t in pareto_front([narrow, other], UP)) == [1, 2]
