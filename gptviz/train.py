"""Kept because every shipped checkpoint records the command ``python -m gptviz.train``: runs
``gptviz.commands.train``."""
import sys

from .commands.train import main

if __name__ == "__main__":
    sys.exit(main())
