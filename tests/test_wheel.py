"""`pip install gptviz`: the wheel is built from a copy of the clone, installed into a fresh virtual environment
with no index (nothing downloaded), and used from a folder outside the clone: ``import gptviz`` is the installed
copy, the shipped lessons and checkpoints are inside it, ``gptviz report`` writes a report on the shipped
Shakespeare GPT, and ``gptviz app`` serves Home: its whole first run, read over Streamlit's own websocket protocol
by the load tests' client (tools/load/protocol.py). Home drawn in Chromium is tests/browser/test_browser.py's (from
the clone, the same files): a browser here would only render the same page again.

The new environment is fresh but not empty-handed: a ``.pth`` file lends it this interpreter's site-packages, so the
wheel's dependencies (torch, Streamlit, … from requirements.txt) resolve there instead of being downloaded again;
the wheel's own files all land in the new environment, and the test checks that ``gptviz`` is imported from it.
"""
import configparser
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what a wheel is built from: the package, the app's own files and the build's metadata (no tests, no .git)
SOURCES = ["gptviz", "app_pages", "lessons", "checkpoints", ".streamlit", "app.py", "setup.py", "pyproject.toml",
           "README.md", "requirements.txt"]


def _run(cmd, cwd, timeout=300, env=None) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{cmd} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the new environment's bin folder, the wheel, a folder outside the clone to run in, its environment)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    # the build backend pyproject.toml names (setuptools, pinned in requirements-dev.txt) from this environment: a
    # build environment of its own would only install the same setuptools again (7 s of the module's 50)
    _run([sys.executable, "-m", "pip", "wheel", "-q", ".", "--no-deps", "--no-build-isolation", "-w",
          str(tmp / "dist")], src, timeout=600)
    wheel = next((tmp / "dist").glob("gptviz-*.whl"))

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    bin_dir = venv / "bin"
    purelib = _run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   tmp).stdout.strip()
    lend = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_lent_dependencies.pth").write_text("\n".join(sorted(lend)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "-q", "--no-index",
          "--find-links", str(tmp / "dist"), "gptviz"], tmp)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return bin_dir, wheel, elsewhere, env, Path(purelib)


def _shipped_checkpoints() -> list[Path]:
    """Every file of checkpoints/: the models, the neurons' and the sparse autoencoder's precomputed files."""
    return sorted(p for p in ROOT.glob("checkpoints/*") if p.is_file() and p.name != ".gitkeep")


def test_the_wheel_carries_the_app_its_data_and_the_pinned_requirements(installed):
    _, wheel, _, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in [*ROOT.glob("lessons/**/*.toml"), *_shipped_checkpoints(),
                    *ROOT.glob("app_pages/*.py"), ROOT / "app.py", ROOT / ".streamlit" / "config.toml"]:
        assert f"gptviz/_bundled/{shipped.relative_to(ROOT).as_posix()}" in names, shipped
    for data in [*ROOT.glob("gptviz/text/data/*/*"), *ROOT.glob("gptviz/ui/static/*")]:
        assert data.relative_to(ROOT).as_posix() in names, data
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    wanted = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    wanted = [w for w in wanted if w]
    assert "torch==2.13.0" in wanted
    assert sorted(line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Requires-Dist: ")) \
        == sorted(wanted)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    scripts = configparser.ConfigParser()
    scripts.read_string(entry)
    assert scripts["console_scripts"]["gptviz"] == "gptviz.commands.cli:main"


def test_gptviz_imports_from_the_installed_copy_outside_the_clone(installed):
    bin_dir, _, elsewhere, env, purelib = installed
    probe = ("import json, gptviz, gptviz.paths as p\n"
             "print(json.dumps([gptviz.__file__, str(p.ROOT), sorted(x.name for x in p.CHECKPOINTS.glob('*')),\n"
             "                  sorted(str(x.relative_to(p.LESSONS)) for x in p.LESSONS.rglob('*.toml'))]))")
    where, root, checkpoints, lesson_files = json.loads(_run([str(bin_dir / "python"), "-c", probe], elsewhere,
                                                             env=env).stdout)
    assert Path(where).is_relative_to(purelib), where
    assert Path(root) == purelib / "gptviz" / "_bundled"
    assert checkpoints == sorted(p.name for p in _shipped_checkpoints())
    assert lesson_files == sorted(str(p.relative_to(ROOT / "lessons")) for p in ROOT.glob("lessons/**/*.toml"))


def test_gptviz_report_runs_the_shipped_model_from_the_installed_copy(installed):
    bin_dir, _, elsewhere, env, _ = installed
    said = _run([str(bin_dir / "gptviz"), "report", "--text", "To be, or not to be", "--out", "r.html"], elsewhere,
                env=env).stdout
    assert "shipped checkpoint: shakespeare" in said and (elsewhere / "r.html").stat().st_size > 100_000
    # the same report from the clone (its own code, in this process): the installed copy read the same checkpoint
    # and got the same loss
    from gptviz.present.report import build

    ctx, _ = build("To be, or not to be", None, 0, 0)
    assert "shakespeare" in ctx.label
    assert re.search(r"loss (\d+\.\d+)", said).group(1) == f"{ctx.trace().loss:.4f}"
    help_text = _run([str(bin_dir / "gptviz"), "train", "--help"], elsewhere, env=env).stdout
    assert help_text.startswith("usage: gptviz train") and "--task" in help_text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _first_run(url: str):
    from tools.load.protocol import Session

    async with Session(url) as s:
        return await s.rerun(timeout=120)


def test_gptviz_app_serves_home(installed):
    import asyncio

    from tools.load import reading

    bin_dir, _, elsewhere, env, purelib = installed
    port = _free_port()
    proc = subprocess.Popen([str(bin_dir / "gptviz"), "app", "--server.port", str(port), "--server.address",
                             "127.0.0.1"], cwd=elsewhere, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("gptviz app did not start")
        run = asyncio.run(_first_run(url))  # a new session: Home's whole run, every element it drew
        assert run.status == "FINISHED_SUCCESSFULLY", run.status
        assert reading.errors(run.elements, run.compile_errors) == ([], [])
        text = "\n".join(reading.texts(run.elements))
        metrics = [el.metric.label for _, el in run.elements if el.WhichOneof("type") == "metric"]
        assert "gptviz: watch a GPT work" in text and "Loss on your text" in metrics
        assert "Traceback" not in text
        kinds = [el.WhichOneof("type") for _, el in run.elements]
        assert kinds.count("plotly_chart") >= 1 and "exception" not in kinds
        # `gptviz app` became the server: the process we started is Streamlit itself, so one SIGTERM stops it
        assert str(purelib / "gptviz" / "_bundled" / "app.py") in _cmdline(proc.pid)
        proc.terminate()
        assert proc.wait(20) is not None
        left = [pid for pid in _pids() if "_bundled/app.py" in _cmdline(pid) and str(purelib) in _cmdline(pid)]
        assert left == [], f"gptviz app left {len(left)} server process(es) running after SIGTERM: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> str:
    """A process's command line ('' once it is gone): /proc/PID/cmdline, its NUL-separated arguments."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
