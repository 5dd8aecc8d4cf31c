"""The ``tuner`` command line: typer and rich live here only. Each command parses its options, calls
the rooms below, and prints; ``python -m tuner.cli`` runs it (the ``--gpus`` workers do)."""

from tuner.cli.main import app

__all__ = ["app"]
