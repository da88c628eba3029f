"""The ``gptviz`` command an installed wheel puts on the PATH (pyproject.toml's [project.scripts]):

    gptviz app [streamlit options]   starts the app (what ``streamlit run app.py`` does in a clone)
    gptviz report …                  one self-contained HTML report (``python -m gptviz.report``)
    gptviz train …                   trains a model (``python -m gptviz.train``)

``gptviz app`` becomes Streamlit (exec), in the folder of the app's own files (the clone, or gptviz/_bundled in a
wheel), so the shipped ``.streamlit/config.toml`` applies and a signal sent to it reaches the server; options after
``app`` go to ``streamlit run`` (``--server.port 8502``).
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional, Sequence

from ..paths import APP_SCRIPT

USAGE = """usage: gptviz {app,report,train} [options]

  app      start the app in a browser (options go to `streamlit run`, e.g. --server.port 8502)
  report   write one self-contained HTML report (gptviz report --help)
  train    train a model and write its checkpoint (gptviz train --help)
"""


def app_command(options: Sequence[str] = ()) -> list[str]:
    """The command that starts the app: this Python's Streamlit on the app's own script."""
    return [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT), *options]


def run_app(options: Sequence[str] = ()) -> int:
    """Become the Streamlit server (exec): a signal sent to ``gptviz app`` (Ctrl-C, a service manager's SIGTERM,
    a test's terminate) reaches the server itself, and nothing is left running once it ends. A child process would
    outlive its parent when the parent alone is stopped. Windows has no exec that keeps the process, so there the
    server is a child, waited for."""
    command = app_command(options)
    if os.name == "nt":
        try:
            return subprocess.call(command, cwd=APP_SCRIPT.parent, env=os.environ.copy())
        except KeyboardInterrupt:
            return 0
    os.chdir(APP_SCRIPT.parent)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return 0  # not reached: exec replaces this process


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    what, rest = args[0], args[1:]
    if what == "app":
        return run_app(rest)
    if what == "report":
        from ..present.report import main as report_main
        return report_main(rest, prog="gptviz report")
    if what == "train":
        from ..training.recipes import main as train_main
        return train_main(rest, prog="gptviz train")
    print(f"gptviz: unknown command {what!r}\n\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
