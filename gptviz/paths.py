"""Where the app's shipped files are: the checkpoints and the lessons, beside the gptviz package."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "checkpoints"
LESSONS = ROOT / "lessons"
