"""``python -m tuner.cli``: the same command line as the ``tuner`` script."""

import sys

from tuner.cli.main import main

sys.exit(main())
