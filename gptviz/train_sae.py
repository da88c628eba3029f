"""Kept because the shipped sparse autoencoder (checkpoints/shakespeare.sae.safetensors) records the command
``python -m gptviz.train_sae``: runs ``gptviz.commands.train_sae``."""
import sys

from .commands.train_sae import main

if __name__ == "__main__":
    sys.exit(main())
