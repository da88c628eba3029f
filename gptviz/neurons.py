"""Kept because the shipped checkpoints/*.neurons.npz record the command ``python -m gptviz.neurons``: runs
``gptviz.commands.neurons``."""
import sys

from .commands.neurons import main

if __name__ == "__main__":
    sys.exit(main())
