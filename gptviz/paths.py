"""Where the app's files are: the shipped checkpoints, lessons and page files (beside the gptviz package in a clone,
inside it under ``_bundled/`` in an installed wheel, see setup.py), and the server's folder of Hugging Face models
(``GPTVIZ_MODELS_DIR``) that links may name."""
import os
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
BUNDLED = PACKAGE / "_bundled"  # an installed wheel: app.py, app_pages/, lessons/, checkpoints/ copied in by setup.py
ROOT = BUNDLED if (BUNDLED / "app.py").is_file() else PACKAGE.parent  # a clone: the repository's root
APP_SCRIPT = ROOT / "app.py"
CHECKPOINTS = ROOT / "checkpoints"
LESSONS = ROOT / "lessons"
MODELS_ENV = "GPTVIZ_MODELS_DIR"  # a folder of model folders (each with config.json), set by whoever runs the server
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a model folder's name as a link may carry it
MAX_MODEL_FOLDERS = 200


def models_dir() -> Path | None:
    """The server's models directory (``$GPTVIZ_MODELS_DIR``, else ``models/`` beside the package), or None if
    there is none."""
    d = Path(os.environ.get(MODELS_ENV) or ROOT / "models")
    return d if d.is_dir() else None


def model_folder_names() -> list[str]:
    """The model folders in the models directory that a link may name: plain names, each holding config.json."""
    d = models_dir()
    if d is None:
        return []
    names = []
    for p in sorted(d.iterdir())[:MAX_MODEL_FOLDERS * 5]:
        if MODEL_NAME.fullmatch(p.name) and p.is_dir() and (p / "config.json").is_file():
            names.append(p.name)
    return names[:MAX_MODEL_FOLDERS]


def model_folder(name: str) -> Path:
    """The folder of the model called ``name`` in the models directory; a ValueError naming the choices if there is
    none (``name`` comes from a link: it is only ever looked up among the names, never used as a path)."""
    names = model_folder_names()
    if not isinstance(name, str) or name not in names:
        raise ValueError("there is no model folder of that name on this server"
                         + (f" (choose one of {', '.join(names)})" if names else " (it has no models directory)"))
    return models_dir() / name
