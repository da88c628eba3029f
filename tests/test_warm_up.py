"""Warming the server up as it starts (issue 37): `streamlit run app.py` finds app.py's st.App, whose lifespan
starts a thread that does the first session's imports and the opening model's trace before anyone joins."""
import asyncio
import json
import logging
import re
import runpy
import subprocess
import sys
import threading
from pathlib import Path

import streamlit as st
from streamlit.web.server.app_discovery import discover_asgi_app

ROOT = Path(__file__).resolve().parents[1]

# In a fresh interpreter, so that the imports are really done by warm(): then the opening pages' runs
FRESH = """
import json, pkgutil, sys
from gptviz.ui import resources, warm_up
import gptviz.ui.sections as sections
from gptviz import perf
from gptviz.present import page_context
sections_at_trace = []
real_resolve = page_context.resolve
def resolve(*args, **kwargs):  # warm() reads it from the module at each call: what was imported when it traced
    sections_at_trace.extend(sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("gptviz.ui.sections.")))
    return real_resolve(*args, **kwargs)
page_context.resolve = resolve
took = warm_up.warm()
unfrozen = len(sys.modules) - perf._modules_at_freeze
missing = [m.name for m in pkgutil.iter_modules(sections.__path__) if f"gptviz.ui.sections.{m.name}" not in sys.modules]
warmed = resources._TRACES.keys()
from streamlit.testing.v1 import AppTest
pages = {}
for p in ("attention", "home"):
    at = AppTest.from_file(sys.argv[1] + f"/app_pages/{p}.py", default_timeout=120).run()
    pages[p] = {"exceptions": len(at.exception), "traces": len(resources._TRACES.keys())}
print(json.dumps({"took": sorted(took), "missing": missing, "at_trace": sections_at_trace,
                  "unfrozen": unfrozen, "warmed": len(warmed), "pages": pages,
                  "ids": list(warmed[0][2][0]), "grads": warmed[0][6]}))
"""


def test_the_warm_up_imports_every_section_and_traces_what_the_opening_pages_read():
    out = subprocess.run([sys.executable, "-c", FRESH, str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["missing"] == [] and r["took"] == ["first_figure_s", "freeze_s", "opening_model_trace_s",
                                                "opening_page_modules_s", "other_page_modules_s"]
    # Home first: when it traced, only the sections the opening page draws were imported, the others came after
    opening = re.search(r"from gptviz\.ui\.sections import (\w+)", (ROOT / "app_pages" / "home.py").read_text())
    assert opening and opening.group(1) == warm_up_module().OPENING_PAGE_SECTIONS
    listing = ("import json, sys, gptviz.ui.sections.{}; print(json.dumps(sorted(m.rsplit('.', 1)[1] "
               "for m in sys.modules if m.startswith('gptviz.ui.sections.'))))").format(opening.group(1))
    home_needs = subprocess.run(  # what importing the opening page's sections imports, in an interpreter of its own
        [sys.executable, "-c", listing], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=True).stdout.strip().splitlines()[-1]
    assert r["at_trace"] == json.loads(home_needs) and opening.group(1) in r["at_trace"]
    assert len(r["at_trace"]) <= len(list((ROOT / "gptviz" / "ui" / "sections").glob("*.py"))) // 4
    assert r["unfrozen"] == 0  # every module it imported is out of the collector's sight before anyone joins
    # one trace, of the opening model's example text, and the pages that open first ask for no other
    assert r["warmed"] == 1 and r["grads"] is False
    assert r["pages"] == {"attention": {"exceptions": 0, "traces": 1}, "home": {"exceptions": 0, "traces": 1}}
    # the opening model is the Shakespeare GPT, and a bare address shows its example line
    from gptviz.model.checkpoint import load_checkpoint

    ck = load_checkpoint(ROOT / "checkpoints" / "shakespeare.safetensors")
    assert r["ids"] == ck.tokenizer.encode("To be, or not to be,--that is the question:--") == ck.tokenizer.encode(
        ck.meta["example"])


def warm_up_module():
    from gptviz.ui import warm_up

    return warm_up


# app.py's warm-up thread, in a fresh interpreter as a server runs it: the full collections Python ran while its
# imports lasted (until gptviz.ui.warm_up exists: warm() itself may collect), and the collector's thresholds after.
IMPORTS_GC = """
import gc, json, runpy, sys
import streamlit
full = []
def importing():
    return not hasattr(sys.modules.get("gptviz.ui.warm_up"), "warm_logged")
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "start" and info["generation"] == 2 and importing()
                    else None)
before = gc.get_threshold()
ns = runpy.run_path(sys.argv[1] + "/app.py", run_name="app")
ns["_warm_up"]()
print(json.dumps({"full": len(full), "frozen": gc.get_freeze_count(), "torch": "torch" in sys.modules,
                  "before": before, "after": gc.get_threshold()}))
"""


def test_the_warm_up_imports_with_no_full_collection_and_leaves_the_collector_as_it_was():
    """Four full collections (0.48 s) ran while ``import gptviz.ui`` made its ~260,000 objects, which it then freezes:
    the warm-up thread holds them off until then, and puts the thresholds back."""
    out = subprocess.run([sys.executable, "-c", IMPORTS_GC, str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-1500:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["torch"] and r["frozen"] > 100_000  # the imports happened in it, and were frozen at their end
    assert r["full"] == 0
    assert r["after"] == r["before"] and r["before"][2] < 100


def test_streamlit_run_serves_app_py_as_an_app_whose_lifespan_starts_the_warm_up(monkeypatch):
    found = discover_asgi_app(ROOT / "app.py")
    assert found.is_asgi_app and found.import_string == "app:app"
    from streamlit import config

    monkeypatch.setattr(config, "_main_script_path", config._main_script_path)  # the App sets it: put it back after
    ns = runpy.run_path(str(ROOT / "app.py"), run_name="app")  # as uvicorn imports it: not "__main__"
    app = ns["app"]
    assert isinstance(app, st.App) and Path(app.script_path).resolve() == ROOT / "app.py"

    from gptviz.ui import warm_up

    ran = threading.Event()
    threads: list[str] = []

    def warm_logged():
        threads.append(threading.current_thread().name)
        ran.set()

    monkeypatch.setattr(warm_up, "warm_logged", warm_logged)

    async def serve():
        async with ns["_warm_up_as_the_server_starts"](None):
            assert ran.wait(30)  # the server serves inside this block while the thread works

    asyncio.run(serve())
    assert threads == ["gptviz-warm-up"]


def test_app_py_run_as_a_script_is_the_navigation():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    assert any("gptviz" in t.value for t in at.title)


def test_a_first_run_whose_early_chart_fails_still_opens_the_page(monkeypatch):
    """The hidden chart that starts plotly.js early (app.py) is only a head start: if drawing it raises, the first
    run goes on and draws the page."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    real_html = st.html  # app.py calls st.html: the module's attribute, read at each call

    def html(body, *args, **kwargs):
        if "gptviz-plotly-early" in str(body):
            raise RuntimeError("the early chart failed")
        return real_html(body, *args, **kwargs)

    monkeypatch.setattr(st, "html", html)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("gptviz" in t.value for t in at.title)
    assert at.get("plotly_chart")  # the page's own charts


def test_the_first_runs_hidden_elements_are_cleared_and_leave_no_state_after_the_next_run():
    """app.py's first run draws hidden, disabled elements (so the browser fetches their code early): none is left on
    the page when the run ends, and their widgets' state is gone after the next run."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    assert len(at.table) == 1 and len(at.text_area) == 1 and len(at.info) == 1  # Home's own, no hidden one
    early = [k for k in at.session_state if str(k).startswith("gptviz-plotly-early")]
    assert len(early) == 5  # the five hidden widgets, while their run's state lasts
    at.run()
    assert not at.exception and not [k for k in at.session_state if str(k).startswith("gptviz-plotly-early")]
    assert len(at.table) == 1 and len(at.text_area) == 1


def test_a_failed_warm_up_is_a_warning_and_nothing_else(monkeypatch, caplog):
    from gptviz.ui import warm_up

    def broken():
        raise RuntimeError("no checkpoint")

    monkeypatch.setattr(warm_up, "warm", broken)
    from streamlit.watcher import polling_path_watcher as ppw

    monkeypatch.setattr(ppw, "_POLLING_PERIOD_SECS", ppw._POLLING_PERIOD_SECS)  # warm_logged changes it: put back
    with caplog.at_level(logging.INFO, logger=warm_up.__name__):
        assert warm_up.warm_logged() is None
    assert [(r.levelname, "no checkpoint" in (r.exc_text or "")) for r in caplog.records] == [("WARNING", True)]
    assert "the first page view will do this work instead" in caplog.records[0].getMessage()


def test_a_session_makes_its_pages_once_and_still_opens_the_page_asked_for(monkeypatch):
    """app.py's navigation makes the 20 ``st.Page`` objects once per process and gives each session its own copies on
    its first run: later runs make and copy none (each made one resolves its path on disk) and still run the page
    asked for; another session makes none and gets objects of its own, never the first one's, which open its pages."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from gptviz.ui import nav

    made = []
    real_page = st.Page

    def page(*args, **kwargs):
        made.append(args[0])
        return real_page(*args, **kwargs)

    monkeypatch.setattr(st, "Page", page)
    monkeypatch.setattr(nav, "_prototypes", None)  # as in a process that has not made them yet
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    assert len(made) == len(nav.available()) == len(nav.PAGES)
    first = at.session_state[nav.NAV_PAGES]
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception
    assert any(t.value.startswith("Attention · layer") for t in at.title)
    at.switch_page("app_pages/tokens_and_batch.py").run()
    assert not at.exception and len(made) == len(nav.PAGES)  # no page made again
    assert at.session_state[nav.NAV_PAGES] is first
    other = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert len(made) == len(nav.PAGES)  # the second session made none either
    theirs = other.session_state[nav.NAV_PAGES]
    assert not {id(p) for ps in first.values() for p in ps} & {id(p) for ps in theirs.values() for p in ps}
    assert not {id(p) for _, p in nav._prototypes} & {id(p) for ps in theirs.values() for p in ps}
    assert [[(p.title, p.url_path) for p in ps] for ps in theirs.values()] == \
        [[(p.title, p.url_path) for p in ps] for ps in first.values()]
    other.switch_page("app_pages/attention.py").run()
    assert not other.exception and any(t.value.startswith("Attention · layer") for t in other.title)


def test_with_file_watching_off_the_config_files_are_polled_every_five_seconds_not_five_times_a_second(monkeypatch):
    """Streamlit polls each config.toml every 0.2 s whatever ``server.fileWatcherType`` says (about 2 % of a busy
    server's CPU): the warm-up makes it wait CONFIG_POLL_S, only when file watching is off. Counted on a watcher of
    Streamlit's own over 1.2 s: five or six looks at Streamlit's period, none at ours."""
    import tempfile
    import time
    from unittest import mock

    from streamlit import config
    from streamlit.watcher import polling_path_watcher as ppw

    from gptviz.ui import warm_up

    monkeypatch.setattr(ppw, "_POLLING_PERIOD_SECS", 0.2)  # Streamlit's own (another test's warm-up may have run)

    def looks_in(seconds: float) -> int:
        with tempfile.NamedTemporaryFile(suffix=".toml") as f, \
                mock.patch.object(ppw.PollingPathWatcher, "_check_if_path_changed", autospec=True,
                                  side_effect=ppw.PollingPathWatcher._check_if_path_changed) as check:
            watcher = ppw.PollingPathWatcher(f.name, lambda _path: None)
            time.sleep(seconds)
            watcher.close()
            return sum(call.args[0] is watcher for call in check.call_args_list)  # an earlier one's last look: not it

    assert looks_in(1.2) >= 4  # Streamlit's own period
    monkeypatch.setattr(config, "get_option", lambda key, _real=config.get_option: "poll" if key ==
                        "server.fileWatcherType" else _real(key))
    assert warm_up.poll_config_files_slowly() is False and ppw._POLLING_PERIOD_SECS == 0.2  # watching on: untouched
    monkeypatch.undo()
    monkeypatch.setattr(ppw, "_POLLING_PERIOD_SECS", 0.2)
    assert config.get_option("server.fileWatcherType") == "none"  # gptviz's .streamlit/config.toml
    monkeypatch.setattr(warm_up, "warm", dict)  # warm_logged makes the change before it warms up
    warm_up.warm_logged()
    assert ppw._POLLING_PERIOD_SECS == warm_up.CONFIG_POLL_S == 5.0
    assert looks_in(1.2) == 0
