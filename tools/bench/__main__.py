"""``python -m tools.bench``: run the benchmark and exit with its status (0 met, 1 a goal missed, 2 a row FAILED)."""
import sys

from tools.bench.cli import main

sys.exit(main())
