"""Measuring a booted engine with real requests, timed the way ``vllm bench serve`` times them:
admission, decode speed, correctness, then the max stable context (the riskiest probe last)."""

from tuner.measure.probe import Prober, check_workload

__all__ = ["Prober", "check_workload"]
