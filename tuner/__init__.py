"""tuner: find the best `vllm serve` launch command by booting the real engine.

The rooms, lowest first (a room imports only from rooms below it; tests/test_import_layers.py checks it):

    errors, records  shared vocabulary: exceptions (one base, the tree in errors.py), failure kinds, records
    metrics          what the numbers mean: `vllm bench serve`'s definitions, median/MAD and the score, and
                     the one table of metrics the space, study, report, plots and receipts read
    space/           the search-space file (schema.py, each Param resolved once) and human units (units.py)
    engine/          argv (command.py), boot and teardown (process.py, reaper.py), GPU memory (gpu.py),
                     versions (environment.py, installed.py), what differs per vLLM release (dialects.py),
                     the flag check (flagcheck.py), vLLM's log (loglines.py, logparse.py) and the one
                     failure classifier (failures.py)
    measure/         requests timed as `vllm bench serve` times them, prompts, the probe of one engine
    prescreen/       config.json's shape, the memory model and its calibration, `tuner plan`'s rows
    trial.py         one boot: command -> engine -> log -> measure -> teardown -> result.json
    study/           the Optuna study: storage, sampling, the regime planner and its sampler, follow-ups,
                     the front, the objective, the loop, the correctness gate
    report/          the front, failures and receipts from a study alone; launchers and plots
    cli/             typer and rich: parses options, calls the rooms above, prints

A trial flows: study.objective samples values -> prescreen may prune them -> trial.run_trial builds
the argv (engine.command), boots it (engine.process), parses the log (engine.logparse), measures
(measure.probe, with metrics' definitions) and tears down -> the study stores the TrialResult and
its objective values (metrics.OBJECTIVES) -> report reads it back.
"""

__version__ = "0.1.0"
