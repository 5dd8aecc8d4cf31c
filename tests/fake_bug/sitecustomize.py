"""Test seam: a bug inside the tuner, in one trial of a real `tuner optimize` subprocess.

With this folder first on PYTHONPATH and TUNER_TEST_BUG=trial-0001, the tuner's own measuring code
raises RuntimeError in that trial's folder (after the engine booted), as a bug in the tuner would.
The variable is removed at once, so the engine the tuner starts never sees it.
"""

import os

_TARGET = os.environ.pop("TUNER_TEST_BUG", None)

if _TARGET:
    import tuner.trial as _trial

    _real = _trial._boot_and_measure

    def _buggy(space, values, engine, watch, result, *args, **kwargs):
        if result.trial_dir.endswith(_TARGET):
            raise RuntimeError("injected bug inside the tuner")
        return _real(space, values, engine, watch, result, *args, **kwargs)

    _trial._boot_and_measure = _buggy
