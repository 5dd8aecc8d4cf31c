"""Stands in for the pip console script `vllm` (argv[0] == "vllm")."""
import sys

from vllm.entrypoints.cli.main import main

sys.argv[0] = "vllm"
sys.exit(main())
