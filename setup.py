"""Builds the wheel (``pip wheel .``; the metadata is in pyproject.toml). Beside the gptviz package, a clone holds
what the app reads at run time: app.py and app_pages/, lessons/, checkpoints/ and .streamlit/config.toml. The
wheel carries them inside the package, under gptviz/_bundled/, where gptviz.paths finds them in an installed
copy: it works offline, from any folder, with ``gptviz app``."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# The shipped models, and what is worked out from them beforehand: the Neurons page's top snippets (*.neurons.npz),
# the sparse autoencoder's snippets and feature labels (*.sae.*)
CHECKPOINT_FILES = ("*.safetensors", "*.npz", "*.toml")
# (what, the file patterns kept): folders are copied with their subfolders (lessons/es, lessons/zh)
BUNDLE = [("app.py", ()), ("app_pages", ("*.py",)), ("lessons", ("*.toml",)), ("checkpoints", CHECKPOINT_FILES),
          (".streamlit/config.toml", ())]


class BuildWithBundle(build_py):
    def run(self):
        super().run()
        out = Path(self.build_lib) / "gptviz" / "_bundled"
        for name, patterns in BUNDLE:
            src, dst = HERE / name, out / name
            if src.is_file():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
                continue
            for pattern in patterns:
                for f in src.rglob(pattern):
                    target = dst / f.relative_to(src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, target)


setup(cmdclass={"build_py": BuildWithBundle})
