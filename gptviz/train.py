"""The command ``python -m gptviz.train`` (recorded in every shipped checkpoint); the recipes live in
``gptviz.training.recipes``."""
import sys

from .training.recipes import main

if __name__ == "__main__":
    sys.exit(main())
