"""gptviz: `streamlit run app.py`. The pages live in app_pages/; gptviz.ui.nav names and groups them.

This file has two parts. Streamlit runs it as each page view's script (``__name__ == "__main__"``): the navigation.
`streamlit run app.py` first imports it to serve it, finds the ``st.App`` below, and starts the server with that
App's lifespan, which warms the process up (``gptviz.ui.warm_up``) while the server already answers: a class that
joins a server started as it sits down no longer waits for the imports.
"""
import importlib

import streamlit as st

# A session's first run puts one hidden, one-cell Plotly chart on the page before anything else, so that the browser
# starts fetching and evaluating Plotly's code (4.7 MB; about 1.5 s of a browser's time on a slow laptop) while the
# server still imports gptviz and runs the page, not after. Beside it, one hidden, disabled element of each other kind
# Home draws whose code the browser fetches only when it first meets one (its table's Arrow reader alone is 0.7 MB),
# fetched and read while the server still imports. A fresh server's Home (8 starts in turns, at a4cfb45) settled a
# median 0.76 s after its last message with them, 1.01 s without. They are cleared when the run ends.
EARLY_PLOTLY_KEY = "gptviz-plotly-early"
_EARLY_PLOTLY_DONE = "_gptviz_plotly_started"
# Plotly looks these up in sys.modules, where another thread's import in progress leaves a half-made module (seen, on a
# server that had just started: "partially initialized module 'pandas' has no attribute 'Series'"). An import
# statement waits for that import to end: the early chart imports them first, and the warm-up thread before anything.
PLOTLY_READS = ("numpy", "pandas", "PIL.Image")


def _import_what_plotly_reads() -> None:
    for name in PLOTLY_READS:
        importlib.import_module(name)


def _draw_early_elements(key: str) -> None:
    """One of each kind of element Home draws whose code the browser loads on first sight; widgets disabled, with keys
    of their own (their state goes when the next run does not draw them)."""
    hidden = {"disabled": True, "label_visibility": "collapsed"}
    st.text_area("early", key=f"{key}.text_area", **hidden)
    st.selectbox("early", ("",), key=f"{key}.selectbox", **hidden)
    st.checkbox("early", key=f"{key}.checkbox", **hidden)
    st.button("early", key=f"{key}.button", disabled=True)
    st.download_button("early", b"", key=f"{key}.download", disabled=True, on_click="ignore")
    st.metric("early", 0, label_visibility="collapsed")
    st.info("early")
    st.table({"early": [0]})
    st.markdown("<span>early</span>", unsafe_allow_html=True)  # markdown with HTML: its own reader (0.2 MB)


def start_plotly_early():
    """On a session's first run, the hidden chart's slot (to clear when the run ends); on any other run, None."""
    if st.session_state.get(_EARLY_PLOTLY_DONE):
        return None
    st.session_state[_EARLY_PLOTLY_DONE] = True
    _import_what_plotly_reads()
    slot = st.empty()
    try:
        with slot.container(key=EARLY_PLOTLY_KEY):
            st.html(f"<style>.st-key-{EARLY_PLOTLY_KEY} {{display: none}}</style>")
            st.plotly_chart({"data": [{"type": "heatmap", "z": [[0]]}], "layout": {"width": 10, "height": 10}},
                            config={"staticPlot": True})
            _draw_early_elements(EARLY_PLOTLY_KEY)
    except Exception:
        slot.empty()  # nothing half-drawn left above the page
        raise
    return slot


if __name__ == "__main__":
    try:
        early_plotly = start_plotly_early()  # before the imports below: they are most of a cold server's first run
    except Exception:  # noqa: BLE001 - only a head start: the page opens without it (a rerun or stop is no Exception)
        early_plotly = None
    try:
        from gptviz.ui import navigation  # the package first: sessions starting at once import it in one order

        navigation().run()
    finally:
        if early_plotly is not None:
            early_plotly.empty()
else:
    import contextlib
    import gc
    import threading

    # While the warm-up imports torch, pandas, Plotly and gptviz (~260,000 objects), Python's own full collections
    # would scan them again and again: three of them took 0.33 s of the 2.3 s import, on the path of the first page a
    # class waits for. Importing gptviz.ui ends by freezing every object then alive (gptviz.perf.freeze_imports), so
    # no full collection runs until then; the young generations still collect as usual.
    NO_FULL_COLLECTION = 1 << 30

    @contextlib.contextmanager
    def _no_full_collection():
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)

    def _warm_up() -> None:
        with _no_full_collection():
            _import_what_plotly_reads()  # first what start_plotly_early waits for
            from gptviz.ui import warm_up  # here, in its own thread: importing gptviz.ui is most of the work

        warm_up.warm_logged()

    @contextlib.asynccontextmanager
    async def _warm_up_as_the_server_starts(_app):
        threading.Thread(target=_warm_up, name="gptviz-warm-up", daemon=True).start()  # daemon: never keeps a stop
        yield

    app = st.App(__file__, lifespan=_warm_up_as_the_server_starts)
