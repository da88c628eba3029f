"""``python -m tools.screenshots [--only NAME[,NAME]] [--out DIR] [--list]``: regenerate the documentation's
pictures from the real app (see the package's docstring). Exits 0 when every picture asked for was saved."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.screenshots.shots import ROOT, all_shots

DEFAULT_OUT = ROOT / "docs" / "screenshots"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", metavar="NAME[,NAME]", help="take only these shots (names as --list)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where to save them (default {DEFAULT_OUT})")
    ap.add_argument("--list", action="store_true", help="print the shots' names, one a line, and take none")
    args = ap.parse_args(argv)
    shots = all_shots()
    if args.list:
        for shot in shots:
            print(shot.name)
        return 0
    if args.only:
        wanted = [n.strip().removesuffix(".png") for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {s.name for s in shots})
        if unknown:
            ap.error(f"no shot named {', '.join(unknown)} (python -m tools.screenshots --list names them)")
        shots = [s for s in shots if s.name in wanted]
    from tools.bench.report import BenchFailure  # what start_server raises when the app does not start
    from tools.screenshots.run import take_all

    try:
        return take_all(shots, args.out.resolve())
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
