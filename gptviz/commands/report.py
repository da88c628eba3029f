"""The command ``python -m gptviz.report`` (the shim gptviz/report.py runs this module) and ``gptviz report``: one
self-contained HTML report; the report itself is ``gptviz.present.report``."""
import sys

from ..present.report import main

if __name__ == "__main__":
    sys.exit(main())
