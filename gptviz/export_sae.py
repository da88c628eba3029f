"""``python -m gptviz.export_sae``: runs ``gptviz.commands.export_sae`` (a shipped SAE as a SAELens folder)."""
import sys

from .commands.export_sae import main

if __name__ == "__main__":
    sys.exit(main())
