"""The HTML report as a download: the page's model, text, layer and head in one file that opens offline."""
from __future__ import annotations

import streamlit as st

from . import section


@section("report.download")
def download(ctx, *, key: str = "report") -> None:
    """A download button for ``gptviz.present.report``'s self-contained HTML report of this view (config, parameters,
    every step of the chosen layer and head with its formula and sentence, the loss). The file is built only
    when the button is clicked."""
    from ...present.report import report_filename, report_html

    # Streamlit keeps the click's callable after the run (for as long as the session, and a while after), so it holds
    # a copy of ctx without this run's traces, which takes the trace from the cache (or traces again) when clicked
    view = ctx.without_traces()
    head = "every head" if ctx.head is None else f"head {ctx.head}"
    st.download_button(
        f"⬇ Report: layer {ctx.layer}, {head} (HTML, works offline)",
        data=lambda: report_html(view, trace=view.trace(), model=view.model).encode("utf-8"),
        file_name=report_filename(ctx), mime="text/html", key=f"{key}.html", on_click="ignore",
        help="One HTML file (about 5 MB, most of it plotly.js) with the config and parameter table, every step of "
             "this layer as a heatmap with its formula and sentence, and the loss taken apart. It needs no network, "
             "and each chart's toolbar saves a PNG or an SVG.")
