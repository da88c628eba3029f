"""No page keeps a trace alive after its script run, beyond the byte-bounded trace cache (gptviz.ui.resources._TRACES).

A trace in the cache is alive by design, and the last run's page context (``ctx``, a global of the page script's
module, which Streamlit leaves in ``sys.modules["__main__"]`` until the next run) holds the traces it memoised. Any
other live trace has a holder that the cache's byte bound does not see: on GPT-2 small at 512 tokens that is 0.4 GB
a text change. Here the cache keeps nothing new (budget 1 byte), each text change is a new trace of the small
untrained model, and after the runs every trace made during the test must be gone but the last context's.

A real server also keeps, per session, what the last run left with Streamlit: each download button's deferred
``data`` callable (Streamlit's media file manager holds it until the session's next run, and for two minutes after the
session disconnects) and each widget's ``format_func``, ``on_change`` and ``args`` (the session's widget metadata).
None of those may reach a trace, or every open tab pins its own 0.4 GB on GPT-2 small at 512 tokens, past the
cache's bound: here they are walked, without going through module globals, and no Trace may be found.

The Who did it page runs in a fresh interpreter: the first integrated-gradients run imports Captum, which imports
IPython, whose completer would keep the ``__main__`` module of that moment (the page script's, with its ``ctx``)
for the life of the process (gptviz.interp.attribution imports Captum with a blank ``__main__``). In this process
Captum may already be imported by another test, and the import would then prove nothing.
"""
import gc
import json
import subprocess
import sys
import types
import weakref

import pytest
from apphelp import ROOT, open_downloads, page, set_sidebar

from gptviz.run.trace import Trace
from gptviz.ui import resources

TEXTS = [f"the cat sat on mat number {i}, and then it ran away" for i in range(4)]


def _leftover(made: list, ctx) -> list:
    """The traces in ``made`` (weakrefs) still alive, not in the trace cache and not memoised by ``ctx``."""
    gc.collect()
    cached = {id(v) for v, _ in resources._TRACES._items.values()}
    own = {id(t) for t in (getattr(ctx, "_traces", None) or {}).values()}
    alive = [r() for r in made]
    return [t for t in alive if t is not None and id(t) not in cached and id(t) not in own]


@pytest.mark.parametrize("name", ["attention", "backward", "step", "logits", "mlp", "home"])
def test_text_changes_leave_no_trace_behind(name, monkeypatch):
    made: list = []
    real_init = Trace.__init__

    def counting_init(self, *a, **kw):
        real_init(self, *a, **kw)
        made.append(weakref.ref(self))

    monkeypatch.setattr(Trace, "__init__", counting_init)
    monkeypatch.setattr(resources._TRACES, "budget", 1)  # nothing new is cached: every live trace has a holder
    at = page(name)
    for text in TEXTS:
        at = set_sidebar(at, "text", text)
        assert not at.exception, [e.message for e in at.exception]
    assert len(made) >= len(TEXTS)  # each change traced anew
    ctx = getattr(sys.modules.get("__main__"), "ctx", None)
    assert type(ctx).__name__ == "Ctx"  # the last run's page context, found where Streamlit leaves it
    left = _leftover(made, ctx)
    assert left == [], f"{len(left)} traces of earlier runs still alive on the {name} page"


def _reaches_trace(roots, limit: int = 300_000):
    """A path of type names from one of ``roots`` to a Trace, following what objects refer to, but never into a
    module, a class or a function's globals (from there everything is reachable, the trace cache too); or None."""
    todo = [(r, (type(r).__name__,)) for r in roots]
    seen = set()
    while todo and len(seen) < limit:
        obj, path = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Trace):
            return path
        if isinstance(obj, (types.ModuleType, type)):
            continue
        if isinstance(obj, types.FunctionType):
            nexts = [c.cell_contents for c in (obj.__closure__ or ()) if _filled(c)]
            nexts += [*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
        elif isinstance(obj, dict) and "__builtins__" in obj:
            continue  # a module's (or a script's) globals
        else:
            nexts = gc.get_referents(obj)
        todo += [(n, path + (type(n).__name__,)) for n in nexts]
    return None


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", ["attention", "weights", "home"])
def test_download_callables_keep_no_trace(name, monkeypatch):
    from streamlit.runtime.media_file_manager import MediaFileManager

    kept = []
    real_add = MediaFileManager.add_deferred

    def recording_add(self, data_callable, *a, **kw):
        kept.append(data_callable)
        return real_add(self, data_callable, *a, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", recording_add)
    at = open_downloads(page(name))  # a step's files are made while its Download popover is open
    kept.clear()
    at = set_sidebar(at, "text", TEXTS[0])
    assert kept, "no download button registered a deferred callable: this test proves nothing"
    assert _reaches_trace(kept) is None, _reaches_trace(kept)
    # and they still build what they did: the notebook of this very view, the tensors' files
    from gptviz.present.notebook import notebook_bytes

    ctx = sys.modules["__main__"].ctx
    notebook = [f for f in kept if "page_setup" in f.__qualname__]
    assert len(notebook) == 1 and _cells(notebook[0]()) == _cells(notebook_bytes(ctx))
    assert all(len(f()) > 0 for f in kept)


def _cells(notebook: bytes) -> list:
    """A notebook's cells without their ids (random for every notebook written)."""
    return [{k: v for k, v in c.items() if k != "id"} for c in json.loads(notebook)["cells"]]


@pytest.mark.parametrize("name", ["attention", "step", "backward", "who", "neurons", "compare"])
def test_widget_metadata_keeps_no_trace(name):
    at = page(name, text=TEXTS[0] + "\n" + TEXTS[1])  # two lines: the batch row selector is drawn too
    at = set_sidebar(at, "text", TEXTS[2] + "\n" + TEXTS[3])
    meta = at._session_state._state._new_widget_state.widget_metadata
    assert meta
    assert _reaches_trace(list(meta.values())) is None, _reaches_trace(list(meta.values()))


_FRESH = r"""
import gc, json, sys, types, weakref
sys.path[:0] = [ROOT, ROOT + "/tests"]
from apphelp import page, set_sidebar
from gptviz.run.trace import Trace
from gptviz.ui import resources

resources._TRACES.budget = 1
made = []
init = Trace.__init__
def counting_init(self, *a, **kw):
    init(self, *a, **kw)
    made.append(weakref.ref(self))
Trace.__init__ = counting_init
at = page("who")
for text in TEXTS:
    at = set_sidebar(at, "text", text)
    assert not at.exception, [e.message for e in at.exception]
main = sys.modules["__main__"]
own = {id(t) for t in main.ctx._traces.values()}
del at
gc.collect()
alive = [r() for r in made if r() is not None]
stale = [m for m in gc.get_objects() if isinstance(m, types.ModuleType) and m is not main
         and str(getattr(m, "__file__", "")).startswith(ROOT + "/app_pages/")]  # an earlier run's page module
print(json.dumps({"made": len(made), "left": len([t for t in alive if id(t) not in own]),
                  "stale_main_modules": [getattr(m, "__file__", "?") for m in stale],
                  "captum": "captum.attr" in sys.modules}))
"""


def test_integrated_gradients_page_in_a_fresh_process():
    code = f"ROOT = {str(ROOT)!r}\nTEXTS = {TEXTS!r}\n" + _FRESH
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["captum"], "the page did not run integrated gradients: this test proves nothing"
    assert got["made"] >= len(TEXTS)
    assert got["stale_main_modules"] == [], "an earlier run's page module (and its ctx) is kept alive"
    assert got["left"] == 0

