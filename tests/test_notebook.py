"""The notebook export: the notebook written for a view is executed by nbclient (a real kernel, from the gptviz
folder) and its figure's data must equal the chart the page draws for the same settings (AppTest), on the
configurable model with an edit (a head switched off) and on the shipped opening model."""
import json

import numpy as np
import pytest
from apphelp import ROOT, array, chart, page
from lazy_import import lazy

from gptviz.present import page_context
from gptviz.present.report_store import Store

nbformat = lazy("nbformat", skip=True)
nbclient = lazy("nbclient", skip=True)
lazy("ipykernel", skip=True)


def executed(ctx):
    from gptviz.present.notebook import notebook_for

    nb = notebook_for(ctx)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    figs = [o["data"]["application/vnd.plotly.v1+json"] for o in outs if "application/vnd.plotly.v1+json" in
            o.get("data", {})]
    text = "".join(o.get("text", "") for o in outs if o.get("output_type") == "stream")
    return figs, text, nb


def z_of(fig: dict) -> np.ndarray:
    return np.asarray(array(fig["data"][0]["z"]), dtype=float)


@pytest.mark.parametrize("query", [
    dict(preset="default", layer=1, head=0, text="the cat sat on the mat.\nthe dog sat", heads_off=True),
    dict(opening=True, layer=2, head=3),
], ids=["configurable, two lines, a head off", "shipped opening model"])
def test_the_exported_notebook_draws_the_pages_figure(query):
    query = dict(query)
    opening, heads_off = query.pop("opening", False), query.pop("heads_off", False)
    at = page("attention", opening=opening, **query)
    if heads_off:  # as a user would: the Attention page's switch for the head in view (its weights become 0)
        pills = [w for w in at.button_group if str(w.key).startswith("gptviz.headoff.") and w.key.endswith(".1")]
        at = pills[0].set_value([0]).run()
        assert np.nansum(z_of(chart(at, "L1 attention weights"))) == 0
    s = dict(at.session_state["gptviz.settings"])
    s.pop("model_key", None)  # a model registered in that session: this resolve loads it again from its preset
    ctx, _ = page_context.resolve(dict(s), Store())
    figs, text, nb = executed(ctx)
    assert len(figs) == 1
    shown = chart(at, f"L{query['layer']} attention weights")
    assert np.allclose(z_of(figs[0]), z_of(shown), atol=1e-6, equal_nan=True)
    assert figs[0]["layout"]["title"]["text"].startswith(f"L{query['layer']} attention weights · head")
    assert "loss " in text
    source = "\n".join(c.source for c in nb.cells)
    assert "import gptviz" in source and ("load_checkpoint('checkpoints/shakespeare" in source) == opening
    if heads_off:
        assert json.loads(json.dumps(s["edits"]))["heads_off"], s["edits"]
