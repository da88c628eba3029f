"""The command that made the shipped transcoders' snippets: ``python -m gptviz.transcoder_snippets``, which runs
``gptviz.commands.transcoder_snippets``."""
import sys

from .commands.transcoder_snippets import main

if __name__ == "__main__":
    sys.exit(main())
