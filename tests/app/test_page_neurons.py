"""The Neurons page: it opens on the Shakespeare GPT with the shipped summary (the promoted tokens checked against a
hand-written W_out[:, n] @ W_U through the final norm), says plainly that the attention-only induction-heads model
has no MLP, and on GPT-2 small's shape computes in the background behind a progress bar without blocking the page."""
import re
from html.parser import HTMLParser

import numpy as np
import pytest
import torch
from apphelp import PAGES, array, chart, messages, page, titles

from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.text import corpus

NEURONS = "app_pages/neurons.py"


@pytest.fixture(autouse=True)
def neurons_page(monkeypatch):
    monkeypatch.setitem(PAGES, "neurons", NEURONS)


def test_opens_on_the_shakespeare_gpt_with_the_shipped_summary():
    at = page("neurons", opening=True)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any(t.endswith("over 16,384 tokens") for t in titles(at)), titles(at)  # the shipped histogram
    assert not at.get("progress")  # nothing to compute: it ships
    snippets = [h.proto.body for h in at.get("html") if "outline:2px solid" in h.proto.body]
    assert snippets and snippets[0].count("outline:2px solid") == 12
    layer, n = int(at.selectbox(key="neurons.layer").value), int(at.number_input(key="neurons.n").value)
    model = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors").model
    with torch.no_grad():
        w = model.transformer.h[layer].mlp.c_proj.weight[:, n].double()
        w = (w - w.mean()) * model.transformer.ln_f.weight.double()
        want = (model.lm_head.weight.double() @ w).numpy()
    np.testing.assert_allclose(array(chart(at, "Promoted")["data"][0]["x"]), np.sort(want)[::-1][:10], atol=1e-4)
    np.testing.assert_allclose(array(chart(at, "Suppressed")["data"][0]["x"]), np.sort(want)[:10], atol=1e-4)


def test_the_ranked_list_chooses_a_neuron():
    at = page("neurons", opening=True)
    ranked = at.selectbox(key="neurons.ranked")
    pick = ranked.options[2]
    at = ranked.select(pick).run()
    assert not at.exception
    layer, n = (int(x) for x in pick.removeprefix("L").split("(")[0].replace("N", "").split())
    assert int(at.selectbox(key="neurons.layer").value) == layer and int(at.number_input(key="neurons.n").value) == n
    assert any(t.startswith(f"L{layer} N{n} at each position") for t in titles(at))


def test_the_attention_only_model_says_it_has_no_mlp():
    at = page("neurons", preset="checkpoint: induction-heads")
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error
    assert "This model has no MLP" in messages(at)


def test_gpt2_small_shape_computes_in_the_background():
    at = page("neurons", preset="gpt2-small")
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    # the page is drawn at once: the neuron on the user's text and what it writes, with the summary on its way
    assert any(t.startswith("L0 N") and "each position" in t for t in titles(at))
    assert "Promoted" in titles(at)
    bars = at.get("progress")
    assert bars or any("over" in t and "tokens" in t for t in titles(at))


def test_a_full_queue_of_summaries_is_a_notice_and_the_rest_of_the_page_works(monkeypatch):
    """As many summaries as the server runs at once already queued (here: room for none): the page says so and
    still draws the neuron on the user's text; no job is made."""
    from collections import OrderedDict

    from gptviz.interp import neuron_jobs

    monkeypatch.setattr(neuron_jobs, "MAX_UNFINISHED", 0)
    monkeypatch.setattr(neuron_jobs, "_JOBS", OrderedDict())
    at = page("neurons")
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("already computing 0 neuron summaries" in str(i.value) for i in at.info), [i.value for i in at.info]
    assert any(t.startswith("L0 N") and "each position" in t for t in titles(at))
    assert not neuron_jobs._JOBS and not at.get("progress")


def test_the_page_waits_as_its_session_and_asks_with_no_model_held(monkeypatch):
    """What the page hands the job table: a weak reference to the model shown (no model held while waiting), its
    parameter count, and this session as the one waiting."""
    import weakref

    from gptviz.interp import neuron_jobs

    asked = []
    real = neuron_jobs.job_for
    monkeypatch.setattr(neuron_jobs, "job_for", lambda *a, **k: asked.append((a, k)) or real(*a, **k))
    at = page("neurons")
    assert not at.exception, [e.message for e in at.exception]
    (key, load, tok, *_), kw = asked[-1]
    assert isinstance(load, weakref.ref) and load() is not None
    assert kw["params"] == load().config.num_params() and isinstance(kw["owner"], str) and kw["owner"]


def hooked(model, rows) -> np.ndarray:
    """(L, B, T, d_mlp): what each MLP's c_proj reads (the neuron activations) for token rows (B, T), caught by a
    plain forward pre-hook."""
    got = {}
    handles = [model.transformer.h[l].mlp.c_proj.register_forward_pre_hook(
        lambda mod, args, l=l: got.__setitem__(l, args[0].clone())) for l in range(model.config.n_layer)]
    try:
        with torch.no_grad():
            model(torch.as_tensor(np.asarray(rows), dtype=torch.long))
    finally:
        for h in handles:
            h.remove()
    return np.stack([got[l].numpy() for l in range(model.config.n_layer)])


def test_the_ranked_list_is_every_layers_most_active_neurons_largest_first():
    """At position 5 of the page's text, the ranked list is the 12 largest activations over every layer's neurons
    of a plain forward hook on the Shakespeare GPT, largest first."""
    at = page("neurons", opening=True)
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    ids = ck.tokenizer.encode(at.text_area(key="w.text").value)
    at = at.selectbox(key=f"neurons.pos.{len(ids)}").set_value(5).run()
    assert not at.exception, [e.message for e in at.exception]
    a = hooked(ck.model, [ids])[:, 0, 5]  # (L, d_mlp)
    order = np.argsort(-a, axis=None, kind="stable")[:12]
    want = [(int(i) // a.shape[1], int(i) % a.shape[1], float(a.flat[i])) for i in order]
    shown = []
    for o in at.selectbox(key="neurons.ranked").options:  # "L3 N126  (activation +3.251)"
        m = re.fullmatch(r"L(\d+) N(\d+)\s+\(activation ([-+][\d.]+)\)", o)
        shown.append((int(m[1]), int(m[2]), float(m[3])))
    assert [s[:2] for s in shown] == [w[:2] for w in want]
    np.testing.assert_allclose([s[2] for s in shown], [w[2] for w in want], atol=6e-4)


class Rows(HTMLParser):
    """The snippet rows of figures.snippets_html: each row's title, value and tokens, and which token is framed."""

    def __init__(self):
        super().__init__()
        self.rows, self.span = [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and "title" in attrs:
            self.rows.append({"where": attrs["title"], "value": None, "tokens": [], "at": None})
        elif tag == "span" and self.rows:
            self.span = attrs.get("style", "")

    def handle_data(self, data):
        if self.span is None:
            return
        row = self.rows[-1]
        if "min-width" in self.span:
            row["value"] = float(data)
        else:
            if "outline" in self.span:
                row["at"] = len(row["tokens"])
            row["tokens"].append(data)
        self.span = None


def test_each_snippet_on_the_page_is_its_own_window_of_the_held_out_plays():
    """The 12 snippets shown: each row's activation is a plain forward hook's on its own window of the shipped slice
    at the token its title names, the rows come largest first, and the tokens shown are that window's around the
    framed one (10 before, 3 after), the held-out play's text."""
    at = page("neurons", opening=True)
    layer, n = int(at.selectbox(key="neurons.layer").value), int(at.number_input(key="neurons.n").value)
    html = next(h.proto.body for h in at.get("html") if "outline:2px solid" in h.proto.body)
    parser = Rows()
    parser.feed(html)
    rows = parser.rows
    assert len(rows) == 12
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    tok = ck.tokenizer
    with np.load(CHECKPOINTS / "shakespeare.neurons.npz", allow_pickle=False) as f:
        windows = f["windows"].astype(np.int64)
    val = corpus.load("val")
    where = [tuple(int(v) for v in re.fullmatch(r"window (\d+), token (\d+)", r["where"]).groups()) for r in rows]
    acts = hooked(ck.model, windows[[w for w, _ in where]])[layer, :, :, n]  # (12, T): each row's own window
    seen = set()
    for i, (r, (w, t)) in enumerate(zip(rows, where)):
        assert abs(acts[i, t] - r["value"]) <= 6e-4
        lo, hi = max(0, t - 10), min(windows.shape[1], t + 4)
        assert r["tokens"] == [tok.token_str(int(i)) for i in windows[w, lo:hi]] and r["at"] == t - lo
        assert tok.decode(windows[w, lo:hi].tolist()) in val
        seen.add(w)
    values = [r["value"] for r in rows]
    assert values == sorted(values, reverse=True) and len(seen) > 1
