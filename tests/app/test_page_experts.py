"""The Experts page against plain-torch computations on the shipped mixture-of-experts model: the router's
probabilities and the chosen experts, each expert's load (padding left out), an expert's top-routed tokens,
switching an expert off (its column 0, the loss of a hand-made run), the same session's other page seeing it off,
and a dense model's one line."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from apphelp import ROOT, TIMEOUT, array, chart, messages, metric, ok, page, set_sidebar
from streamlit.testing.v1 import AppTest

from gptviz import encode_batch
from gptviz.model.checkpoint import load_checkpoint

MOE = "checkpoint: shakespeare-moe"
TWO_LINES = "To be, or not to be\nWherefore art thou Romeo? Deny thy father and refuse thy name"
OFF_KEY = "gptviz.expertoff.moe.off.0"


@pytest.fixture(scope="module")
def ckpt():
    return load_checkpoint(ROOT / "checkpoints" / "shakespeare-moe.safetensors")


def plain_run(ckpt, text: str, off: tuple = ()):
    """The model on ``text`` with a hand-written hook: layer 0's router input, logits (expert ``off`` at -inf)
    and the loss, without trace() or the edits module."""
    model, tok = ckpt.model, ckpt.tokenizer
    b = encode_batch(tok, text, model.config.block_size)
    seen = {}

    def rec(name, x):
        if name == "blocks.0.mlp.hook_router_logits" and off:
            x = x.clone()
            x[..., list(off)] = float("-inf")
        seen[name] = x.detach().clone()
        return x

    with torch.no_grad():
        logits = model.run(b.x, b.attention_mask, rec=rec)
    loss = F.cross_entropy(logits.flatten(0, 1), b.y.flatten(), ignore_index=-100)
    return b, seen, float(loss)


def heat(at):
    return chart(at, "L0 router probabilities")


def dots(c) -> set:
    """(row, expert) of every dot on the heatmap."""
    sc = [t for t in c["data"] if t.get("type") == "scatter"][0]
    return {(int(y), int(str(x).split()[1])) for x, y in zip(sc["x"], array(sc["y"]).astype(int))}


def test_router_probabilities_and_chosen_experts_match_a_softmax_by_hand(ckpt):
    at = ok(page("experts", preset=MOE))
    text = ckpt.meta["example"]
    b, seen, _ = plain_run(ckpt, text)
    x = seen["blocks.0.ln2.hook_out"][0]  # (T, C): what the router reads
    W = ckpt.model.transformer.h[0].mlp.router.weight.detach()  # (E, C)
    p = torch.softmax(x @ W.T, dim=-1).numpy()
    c = heat(at)
    z = array(c["data"][0]["z"])
    assert z.shape == p.shape and np.allclose(z, p, atol=1e-5)
    order = np.argsort(-p, axis=-1, kind="stable")[:, :2]  # top 2 by a sort
    assert dots(c) == {(t, int(e)) for t in range(len(p)) for e in order[t]}
    w = np.take_along_axis(p, order, -1)
    w = w / w.sum(-1, keepdims=True)  # renormalised (expert_renorm)
    hover = [t for t in c["data"] if t.get("type") == "scatter"][0]["text"]
    first = [h for h in hover if h.startswith("0: ")]
    assert len(first) == 2 and all(any(f"weight {v:.3f}" in h for h in first) for v in w[0])
    tokens = [ckpt.tokenizer.token_str(int(i)) for i in b.x[0]]
    assert c["layout"]["yaxis"]["ticktext"] == [tokens[i] for i in c["layout"]["yaxis"]["tickvals"]]


def test_load_counts_choices_without_padding_on_two_rows_and_row_1_is_shown(ckpt):
    at = ok(set_sidebar(page("experts", preset=MOE), "text", TWO_LINES))
    b, seen, _ = plain_run(ckpt, TWO_LINES)
    assert b.x.shape[0] == 2 and min(b.lengths) < b.x.shape[1]  # two rows, one padded
    probs = torch.softmax(seen["blocks.0.mlp.hook_router_logits"], -1).numpy()
    counts = np.zeros(8)
    for r, n in enumerate(b.lengths):  # real tokens only
        for t in range(n):
            for e in np.argsort(-probs[r, t], kind="stable")[:2]:
                counts[e] += 1
    bars = chart(at, "L0 each expert's load")["data"]
    assert np.allclose(array(bars[0]["y"]), counts / counts.sum(), atol=1e-9)
    assert np.allclose(array(bars[1]["y"]), ckpt.meta["expert_load"]["0"])
    assert "load" in " ".join(m.value for m in at.markdown)
    at = ok(set_sidebar(at, "batch", 1))
    z = array(heat(at)["data"][0]["z"])
    n1 = b.lengths[1]
    assert z.shape == (n1, 8) and np.allclose(z, probs[1, :n1], atol=1e-5)


def test_top_routed_tokens_are_an_argsort_by_hand(ckpt):
    at = page("experts", preset=MOE)
    at.selectbox(key="moe.top.expert").set_value(3).run()
    ok(at)
    b, seen, _ = plain_run(ckpt, ckpt.meta["example"])
    probs = torch.softmax(seen["blocks.0.mlp.hook_router_logits"][0], -1).numpy()
    top2 = np.argsort(-probs, -1, kind="stable")[:, :2]
    weight = {t: probs[t, 3] / probs[t, top2[t]].sum() for t in range(len(probs)) if 3 in top2[t]}
    want = sorted(weight, key=lambda t: -weight[t])[:10]
    df = at.dataframe[0].value
    assert df["position"].tolist() == want
    assert np.allclose(df["weight"].to_numpy(), [weight[t] for t in want], atol=1e-5)
    assert df["token"].tolist() == [ckpt.tokenizer.token_str(int(b.x[0, t])) for t in want]
    assert len(at.dataframe[1].value) == 10


def test_switching_an_expert_off_zeroes_its_column_and_gives_a_hand_made_runs_loss(ckpt):
    at = ok(page("experts", preset=MOE))
    _, _, loss_on = plain_run(ckpt, ckpt.meta["example"])
    _, seen, loss_off = plain_run(ckpt, ckpt.meta["example"], off=(3,))
    at.multiselect(key=OFF_KEY).set_value([3]).run()
    ok(at)
    c = heat(at)
    z = array(c["data"][0]["z"])
    assert (z[:, 3] == 0).all() and "expert 3 (off)" in c["data"][0]["x"]
    assert not any(e == 3 for _, e in dots(c)) and len(dots(c)) == 2 * len(z)  # its tokens went to others
    assert np.allclose(z, torch.softmax(seen["blocks.0.mlp.hook_router_logits"][0], -1).numpy(), atol=1e-5)
    assert metric(at, "Loss, every expert on") == pytest.approx(loss_on, abs=1e-4)
    assert metric(at, "Loss with the experts off") == pytest.approx(loss_off, abs=1e-4)
    assert loss_off != pytest.approx(loss_on, abs=1e-4)
    at = [b for b in at.button if b.label == "Clear all edits"][0].click().run()
    assert (array(heat(at)["data"][0]["z"])[:, 3] > 0).all() and at.multiselect(key=OFF_KEY).value == []


def test_an_expert_off_on_the_experts_page_is_off_on_the_mlp_page_of_the_same_session():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["preset"] = MOE
    at.run()
    at.switch_page("app_pages/experts.py").run()
    at.multiselect(key=OFF_KEY).set_value([5]).run()
    at.switch_page("app_pages/mlp_and_residual.py").run()
    assert not at.exception, [e.message for e in at.exception]
    z = array(chart(at, "L0 router probabilities")["data"][0]["z"])
    assert (z[:, 5] == 0).all() and (z[:, 4] > 0).all()


def test_a_dense_model_says_so_and_offers_the_shipped_mixture():
    at = page("experts")
    assert not at.exception, [e.message for e in at.exception]
    assert "no mixture of experts" in messages(at)
    button = [b for b in at.button if "shakespeare-moe" in b.label][0]
    at = ok(button.click().run())
    assert at.title[0].value.startswith("Experts · layer 0 · 8 experts, top 2")


def test_tokens_reach_the_chart_as_text_not_markup():
    """The shipped model's tokenizer has no '<' (the page leaves it out), so the figure is fed such tokens itself."""
    from gptviz.present.figures.experts import routing_heatmap

    tokens = ["<b>x</b>", "<br>", "&", "[a](javascript:alert(1))"]
    p = np.full((4, 3), 1 / 3)
    w = np.zeros((4, 3))
    w[:, 0] = 1.0
    spec = json.dumps(routing_heatmap(p, w, tokens, off={2}, title="t").to_dict())
    assert "<b>x" not in spec and "'<br>'" not in spec and "&lt;b&gt;x&lt;/b&gt;" in spec
    c = json.loads(spec)
    assert c["layout"]["yaxis"]["ticktext"] == ["&lt;b&gt;x&lt;/b&gt;", "&lt;br&gt;", "&amp;", tokens[3]]
    assert c["data"][0]["x"] == ["expert 0", "expert 1", "expert 2 (off)"]
