"""The command that made the shipped transcoders (checkpoints/*.transcoder.safetensors):
``python -m gptviz.train_transcoder``, which runs ``gptviz.commands.train_transcoder``."""
import sys

from .commands.train_transcoder import main

if __name__ == "__main__":
    sys.exit(main())
