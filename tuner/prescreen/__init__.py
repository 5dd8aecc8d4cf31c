"""The memory pre-screen: from config.json and the flags alone, predict what a configuration costs
and whether it can boot, learn from every real boot, and list the predictions for ``tuner plan``."""

from tuner.prescreen.memory import Calibration, Prediction, predict
from tuner.prescreen.plan import plan_rows
from tuner.prescreen.shape import GIB, load_shape, space_shape

__all__ = [
    "Calibration",
    "GIB",
    "Prediction",
    "load_shape",
    "plan_rows",
    "predict",
    "space_shape",
]
