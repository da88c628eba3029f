"""A step's downloads sit in a popover whose buttons are made only while it is open (issue 37: three elements a run
become one). Open, they give the step's whole tensor (.npy) and the view on screen (CSV), equal to a plain trace of
the same weights and text; closed, the page registers no file of a step."""
import csv
import io
import sys

import numpy as np
import torch
from apphelp import ok, open_downloads, page, set_sidebar

from gptviz.run.trace import trace

NAME = "blocks.0.attn.hook_pattern"
TEXT = "the cat sat on the mat.\nthe dog ran."  # two rows, the second padded


def _files(monkeypatch):
    """{file name: its deferred callable} for every file the page registers from here on."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    made = {}
    real_add = MediaFileManager.add_deferred

    def recording_add(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        made[file_name] = data_callable
        return real_add(self, data_callable, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", recording_add)
    return made


def test_closed_no_step_file_is_made_and_open_both_equal_a_plain_trace(monkeypatch):
    made = _files(monkeypatch)
    at = ok(set_sidebar(page("attention", text=TEXT, head=1), "batch", 1))  # batch row 1, head 1
    assert at.get("download_button") == [] and made == {}  # not even the notebook's, in the sidebar
    made.clear()
    at = ok(open_downloads(at))
    labels = [b.proto.label for b in at.get("download_button")]
    assert "⬇ .npy (whole tensor)" in labels and "⬇ CSV (this view)" in labels and "⬇ gptviz-view.ipynb" in labels
    ctx = sys.modules["__main__"].ctx
    with torch.no_grad():  # the reference: a plain trace of the page's model on the page's tokens
        ref = trace(ctx.model, torch.as_tensor(ctx.batch.x), attention_mask=torch.as_tensor(ctx.batch.attention_mask))
    want = ref[NAME].numpy()  # (B, H, T, T)
    whole = np.load(io.BytesIO(made[NAME.replace(".", "_") + ".npy"]()))
    assert whole.shape == want.shape and whole.shape[0] == 2
    np.testing.assert_allclose(whole, want, rtol=1e-6, atol=1e-7)
    rows = list(csv.reader(io.StringIO(made[NAME.replace(".", "_") + ".csv"]().decode("utf-8"))))
    view = np.array([[float(v) if v else np.nan for v in r[1:]] for r in rows[1:]])
    n = int(ctx.batch.lengths[1])  # row 1's real tokens (the row is padded to the batch's length)
    assert ctx.batch.lengths[0] > n and [r[0] for r in rows[1:4]] == ["the␣", "d", "o"]  # row 1's own tokens
    shown = ~np.isnan(view)  # the cells attention may use: causal, and no padding
    assert shown.sum() == n * (n + 1) // 2 and not np.triu(shown, 1).any()
    np.testing.assert_allclose(view[shown], want[1, 1][: view.shape[0], : view.shape[1]][shown], rtol=1e-5,
                               atol=1e-6)
