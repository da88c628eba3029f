"""The HTML report as a download: the page's model, text, layer and head in one file that opens offline."""
from __future__ import annotations

import dataclasses
import weakref

import streamlit as st

from . import section


@section("report.download")
def download(ctx, *, key: str = "report") -> None:
    """A download button for ``gptviz.present.report``'s self-contained HTML report of this view (config, parameters,
    every step of the chosen layer and head with its formula and sentence, the loss). The file is built only
    when the button is clicked."""
    from ...present.report import report_filename, report_html

    # Streamlit keeps the click's callable after the run (for as long as the session, and a while after), so it
    # holds neither ctx (which memoises this run's traces) nor the trace: a weak reference to the trace, at hand
    # while it is cached, and a copy of ctx without traces that traces again if it was forgotten.
    view, kept = dataclasses.replace(ctx, _traces={}), weakref.ref(ctx.trace())
    head = "every head" if ctx.head is None else f"head {ctx.head}"

    def html() -> bytes:
        tr = kept()
        return report_html(view, trace=tr if tr is not None else view.trace(), model=view.model).encode("utf-8")

    st.download_button(
        f"⬇ Report: layer {ctx.layer}, {head} (HTML, works offline)",
        data=html,
        file_name=report_filename(ctx), mime="text/html", key=f"{key}.html", on_click="ignore",
        help="One HTML file (about 5 MB, most of it plotly.js) with the config and parameter table, every step of "
             "this layer as a heatmap with its formula and sentence, and the loss taken apart. It needs no network, "
             "and each chart's toolbar saves a PNG or an SVG.")
