"""The command ``python -m gptviz.train`` (the form recorded in every shipped checkpoint; the shim gptviz/train.py
runs this module) and ``gptviz train``; the recipes live in ``gptviz.training.recipes``."""
import sys

from ..training.recipes import main

if __name__ == "__main__":
    sys.exit(main())
