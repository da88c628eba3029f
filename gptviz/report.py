"""Kept because ``python -m gptviz.report`` is the recorded form of the command (README, ``gptviz report --help``'s
usage line, tests/test_report.py): runs ``gptviz.commands.report``."""
import sys

from .commands.report import main

if __name__ == "__main__":
    sys.exit(main())
