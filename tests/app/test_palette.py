"""The palette switch reaches every chart: each page opened with ``?palette=colour-blind safe`` draws no trace on
the default signed (RdBu) or probability (Blues) scale, and at least one on the palette's own; the HTML report
too. Scales are compared with plotly's own named scales, not with gptviz's constants."""
import json

import pytest
from apphelp import PAGES, charts, page
from plotly.colors import get_colorscale

from gptviz.present import report as rep

CVD = "colour-blind safe"
OLD = {json.dumps(get_colorscale(n)) for n in ("RdBu_r", "Blues")}
NEW = {json.dumps(get_colorscale(n)) for n in ("PuOr_r", "YlGnBu")}


def scales(figs: list[dict]) -> list[str]:
    return [json.dumps([[float(a), str(b)] for a, b in t["colorscale"]]) for f in figs for t in f["data"]
            if t.get("colorscale") and len(t["colorscale"]) > 2]


def norm(names: set) -> set:
    return {json.dumps([[float(a), str(b)] for a, b in json.loads(s)]) for s in names}


@pytest.mark.parametrize("name", list(PAGES))
def test_every_chart_on_every_page_takes_the_palette(name):
    old, new = norm(OLD), norm(NEW)
    at = page(name, opening=True, palette=CVD)
    assert not at.exception
    found = scales(charts(at))
    assert not [s for s in found if s in old], name
    by_default = [s for s in scales(charts(page(name, opening=True))) if s in old]
    assert bool([s for s in found if s in new]) == bool(by_default), name  # each default scale was swapped


def test_the_report_takes_the_palette():
    ctx, _ = rep.build("the cat sat on the mat.", preset="default")
    ctx.s["palette"] = CVD
    html = rep.report_html(ctx)
    assert get_colorscale("PuOr_r")[0][1] in html and get_colorscale("RdBu_r")[0][1] not in html
