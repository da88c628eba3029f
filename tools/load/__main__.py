"""``python -m tools.load``: see tools/load/__init__.py."""
import sys

from tools.load.cli import main

sys.exit(main())
