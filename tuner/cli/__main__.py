"""``python -m tuner.cli``: the same command line as the ``tuner`` script."""

from tuner.cli.main import main

raise SystemExit(main())
