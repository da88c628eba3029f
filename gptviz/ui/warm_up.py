"""Warming a server up as it starts, before anyone opens a page.

`streamlit run app.py` serves ``app.py`` as an ``st.App`` whose lifespan starts a thread that imports this module
and calls ``warm_logged`` once, in the server process. That thread does what the first run of the first session
would otherwise do while a class waits: import the opening page's modules (torch, pandas, Plotly and gptviz take
about 1.6 s on a quiet core), read the opening model, trace its example text and build one heatmap, so that Plotly's
own lazy imports happen too, and only then import every other page's modules: the first page a class waits for
comes first. Last, it moves all of that out of the garbage collector's sight (``gptviz.perf``): the first
page's run would otherwise do it, with a full collection, while the class waits.

The server answers while this runs. A session that starts before it is done waits for the same imports on Python's
import lock, as it would have without the warm-up, and then finds them done. Nothing here is shared mutable state:
the trace and model go into the same process-wide caches a page reads, as any page's first run puts them there.
"""
from __future__ import annotations

import importlib
import logging
import pkgutil
import time

_LOG = logging.getLogger(__name__)
OPENING_PAGE_SECTIONS = "home"  # the sections module of the page a bare address opens


def warm() -> dict[str, float]:
    """Import every page's modules, trace the opening model's example text and build its first heatmap; the
    seconds each part took. Raises what a part raised: ``start`` logs it, and the page that needs the same work
    then does it (and shows its own message) as it would have without the warm-up."""
    t0 = time.perf_counter()
    from ..perf import refreeze_after_imports
    from . import sections

    importlib.import_module(f"{sections.__name__}.{OPENING_PAGE_SECTIONS}")  # the page a class opens first
    t1 = time.perf_counter()

    from ..model.hook_names import act_name
    from ..present import figures, url_params
    from ..present.descriptions import step_info
    from ..present.figures.finishing import finished
    from ..present.matrices import step_matrix
    from ..present.page_context import resolve
    from . import resources

    s, _ = url_params.read({})
    ctx, _ = resolve(s, resources)
    tr = ctx.trace()
    t2 = time.perf_counter()

    name = act_name("pattern", 0)
    fig = figures.heatmap(step_matrix(tr[name], step_info(tr, name), ctx.labels(), ctx.b, 0, n_pos=ctx.n_pos),
                          clickable=True)
    finished(fig).to_json()
    t3 = time.perf_counter()
    for m in pkgutil.iter_modules(sections.__path__):  # the other pages' last: after what Home draws first
        importlib.import_module(f"{sections.__name__}.{m.name}")
    t4 = time.perf_counter()
    refreeze_after_imports()  # the ~560 modules imported here out of the collector's sight, before anyone joins
    t5 = time.perf_counter()
    return {"opening_page_modules_s": t1 - t0, "opening_model_trace_s": t2 - t1, "first_figure_s": t3 - t2,
            "other_page_modules_s": t4 - t3, "freeze_s": t5 - t4}


# Streamlit watches each config.toml (the user's and the app's, there or not) by polling it every 0.2 s, whatever
# ``server.fileWatcherType`` says: each poll a task handed to a thread pool and a stat, about 2 % of a busy server's
# CPU (py-spy, 20 students on Attention) and most of an idle one's. With file watching off (gptviz's config: nobody
# edits during a lesson), a config change is still seen, within CONFIG_POLL_S (as is a secrets file's, whose watch
# reads the same period).
CONFIG_POLL_S = 5.0


def poll_config_files_slowly() -> bool:
    """With ``server.fileWatcherType`` "none", make Streamlit's config-file polling wait CONFIG_POLL_S between looks
    (its polling task reads the period from its module on every look); whether it did."""
    from streamlit import config
    from streamlit.watcher import polling_path_watcher

    if config.get_option("server.fileWatcherType") != "none" or not hasattr(polling_path_watcher,
                                                                            "_POLLING_PERIOD_SECS"):
        return False
    polling_path_watcher._POLLING_PERIOD_SECS = CONFIG_POLL_S  # type: ignore[misc]  # Final in Streamlit's typing
    return True


def warm_logged() -> None:
    """``warm``, its failure logged rather than raised (what ``app.py``'s warm-up thread runs)."""
    try:
        poll_config_files_slowly()
        took = warm()
    except Exception:  # noqa: BLE001 - a failed warm-up costs the first session its time, nothing else
        _LOG.warning("gptviz: warming up failed; the first page view will do this work instead", exc_info=True)
        return
    _LOG.info("gptviz: warmed up (%s)", ", ".join(f"{k} {v:.2f}" for k, v in took.items()))
