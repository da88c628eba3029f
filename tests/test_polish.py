"""What a person sees first: the home page is called Home, icons draw without emoji fonts, titles never overlap."""
import re

import numpy as np
from conftest import ROOT

from gptviz.present import figures, matrices


def test_the_navigation_names_home_and_uses_material_icons_only():
    from gptviz.ui.nav import PAGES

    assert PAGES[0][1] == "Home" and PAGES[0][3] == ""  # the default page, at the bare address
    assert all(icon.startswith(":material/") and icon.endswith(":") for _, _, icon, _, _ in PAGES)
    files = {p for p, *_ in PAGES}
    # every page is in the navigation
    assert files == {f"app_pages/{f.name}" for f in (ROOT / "app_pages").glob("*.py")}
    for f in (ROOT / "app_pages").glob("*.py"):
        for icon in re.findall(r'page_setup\([^,]+,\s*"([^"]+)"', f.read_text()):
            assert icon.startswith(":material/"), (f.name, icon)


def test_side_by_side_titles_wrap_so_they_cannot_run_into_each_other():
    m = matrices.Matrix(np.eye(12), [str(i) for i in range(12)], [str(i) for i in range(12)],
                        "query", "key", "probability")
    fig = figures.side_by_side(m, m, "Plain average: row t gives 1/(t+1) to each earlier token",
                               "Learned weights, layer 0 head 0")
    notes = [a["text"] for a in fig.to_plotly_json()["layout"]["annotations"]]
    assert len(notes) == 2 and all(len(line) <= 30 for n in notes for line in n.split("<br>"))
    assert notes[0].replace("<br>", " ") == "Plain average: row t gives 1/(t+1) to each earlier token"
    assert fig.layout.margin.t >= 80  # room for two lines above the plots


def test_the_server_never_runs_a_full_garbage_collection_after_a_run():
    """Streamlit's default gc.collect(2) after every run took ~170 ms over torch's, plotly's and its own objects,
    holding the lock the last messages to the browser wait for: the config turns it off, and importing the UI
    freezes the imports out of the collector's sight (so Python's own full collections stay cheap)."""
    import gc
    import subprocess
    import sys
    import tomllib

    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["runner"]["postScriptGC"] is False and cfg["runner"]["magicEnabled"] is False
    out = subprocess.run([sys.executable, "-c", "import gc, gptviz.ui; print(gc.get_freeze_count())"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    assert int(out.stdout.strip().splitlines()[-1]) > 100_000  # torch, plotly and streamlit: frozen
    assert gc.isenabled()


REFREEZE = """
import gc, sys
import gptviz.ui
from gptviz.perf import refreeze_after_imports
from gptviz import GPT, ModelConfig
at_import = gc.get_freeze_count()
print("again at once", refreeze_after_imports())
GPT(ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8))  # a model: no compiler imported
import torch._dynamo  # a heavy import made later (~800 modules with sympy): transformers' model classes make it
print("new objects", len(gc.get_objects()))
print("refroze", refreeze_after_imports())
print("frozen more", gc.get_freeze_count() - at_import)
print("left in sight", len(gc.get_objects()))
print("again", refreeze_after_imports())
from streamlit.testing.v1 import AppTest
import captum  # as the Who did it page's integrated gradients would: a page's run freezes it at its start
before = gc.get_freeze_count()
at = AppTest.from_file("app_pages/tokens_and_batch.py", default_timeout=120)
at.query_params["preset"] = "default"
at.run()
print("page froze", gc.get_freeze_count() - before)
"""


def test_what_a_server_imports_later_is_frozen_too_at_the_next_pages_start():
    """A transformers model imports torch._dynamo and sympy (~800 modules), integrated gradients captum: frozen at
    the next page's start, else every full collection scans them again. Counted in a fresh process."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", REFREEZE], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-1500:]
    got = dict(line.rsplit(" ", 1) for line in out.stdout.strip().splitlines() if line[:1].isalpha())
    assert got["again at once"] == "False"
    new = int(got["new objects"])
    assert new > 50_000  # the build's imports, in the collector's sight
    assert got["refroze"] == "True" and int(got["frozen more"]) >= 0.9 * new  # less the garbage collected first
    assert int(got["left in sight"]) < 1_000
    assert got["again"] == "False"
    assert int(got["page froze"]) > 10_000


BUILDS = """
import sys
from gptviz import preset
from gptviz.model.build import build_model
for name in ("default", "llama-like", "original-transformer", "decoder-cross-attention"):
    build_model(preset(name, vocab_size=50))
print(sorted(m for m in ("torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes", "sympy")
             if m in sys.modules))
"""


def test_building_models_imports_no_compiler():
    """torch's own first draw of an nn.Linear or nn.Embedding built on the meta device runs a Python decomposition
    that imports torch._dynamo (2.7 s of CPU): gptviz's layers skip that draw (the model draws every
    weight from its seed), so a new process (a server's first page, a CLI run) builds its models without them.
    Nor sympy: nn.Module.to_empty's empty_like of a meta tensor imports it (0.3 s) through torch's shape reasoning."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", BUILDS], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
