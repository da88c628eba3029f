"""Lesson 8 as a student walks it: select feature nodes on the attribution graph of step 2, move on to step 4 (which
does not draw the graph), name them as a group, move on to step 5 and switch the group off. The intervention chart's
two bars for the top target logit equal two computations made here without the page: the graph's prediction as
(scale − 1) × the sum of the graph's edges (``attribute``'s adjacency) from those features into that logit, and the
real change from the shipped GPT written in plain PyTorch (tests/transcoder_oracles.py), run as circuit-tracer's
``feature_intervention`` runs it by default (the page's default); then, switched to the replacement model, with the
transcoder spliced in for every MLP, each MLP's error on the line worked out here too; and with everything held, the
graph's own prediction.

The walk fails if steps 3 to 5 name another graph than step 2's (``graph_key`` in the lesson file) or if a selection
made on the graph is lost on a step that does not draw it (``chosen``'s ``.kept`` copy in circuits.py)."""
import math

import pytest
import torch
import torch.nn.functional as F
from apphelp import ROOT, array, charts, messages, rendered
from streamlit.testing.v1 import AppTest
from transcoder_oracles import features_by_hand, output_by_hand, plain_forward, plain_steered

from gptviz.interp.attribution_graph import attribute
from gptviz.interp.graph_json import node_id
from gptviz.interp.transcoder import load_transcoder, transcoder_path
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.present import lessons as L
from gptviz.text.batches import encode_batch

PAGE = str(ROOT / "app_pages" / "lessons.py")
LID = "08_tracing_a_circuit"
GRAPH_STEP = 1  # step 2 (0-based 1) draws the graph; steps 3 to 5 name it in their options
GRAPH_KEY = f"L.{LID}.{GRAPH_STEP}"
GROUP = "end of the word"
N_PICKED = 3


def clean(at: AppTest) -> AppTest:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def heading(at: AppTest) -> str:
    return next(m.value[3:] for m in at.markdown if m.value.startswith("## "))


def graph_spec(at: AppTest) -> dict:
    return next(c for c in charts(at) if c["layout"]["title"]["text"].startswith("Attribution graph of"))


def bars_of(at: AppTest) -> tuple:
    """(predicted, real): the intervention chart's two rows of bars, one value per target logit."""
    found = [c for c in charts(at) if "the logits' change" in c["layout"]["title"]["text"]]
    assert found, f"no intervention chart: {messages(at)}"
    bars = found[0]
    assert bars["layout"]["title"]["text"].startswith(f"{N_PICKED} feature(s) × 0.0"), bars["layout"]["title"]
    predicted, real = (array(t["x"]).astype(float) for t in bars["data"])
    return predicted, real


def mlp_errors(model, tc, x) -> list[torch.Tensor]:
    """Each layer's MLP output minus the transcoder's reconstruction of it, (T, d) in double, on the model's own
    forward pass: the plain pre-norm GPT of tests/transcoder_oracles.py, the features and the decoder's sums by its
    loops."""
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    c = model.config
    B, T = x.shape
    h = sd["transformer.wte.weight"][x] + sd["transformer.wpe.weight"][:T]
    feats, errors = [], []
    for layer in range(c.n_layer):
        p = f"transformer.h.{layer}."
        a = F.layer_norm(h, (c.n_embd,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], c.ln_eps)
        qkv = a @ sd[p + "attn.c_attn.weight"].T + sd[p + "attn.c_attn.bias"]
        q, k, v = (t.view(B, T, c.n_head, c.d_head).transpose(1, 2) for t in qkv.split(c.n_embd, -1))
        s = (q @ k.transpose(-1, -2) / math.sqrt(c.d_head)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                                                                        float("-inf"))
        h = h + (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, c.n_embd) @ sd[p + "attn.c_proj.weight"].T \
            + sd[p + "attn.c_proj.bias"]
        m = F.layer_norm(h, (c.n_embd,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], c.ln_eps)
        out = F.gelu(m @ sd[p + "mlp.c_fc.weight"].T + sd[p + "mlp.c_fc.bias"], approximate="tanh") \
            @ sd[p + "mlp.c_proj.weight"].T + sd[p + "mlp.c_proj.bias"]
        feats.append(features_by_hand(tc, layer, m.float()).double())
        errors.append((out - output_by_hand(tc, layer, feats))[0])
        h = h + out
    return errors


def demeaned(logits: torch.Tensor, token: int) -> float:
    last = logits[-1].double()
    return float(last[token] - last.mean())


@pytest.fixture(scope="module")
def line():
    """The lesson's model, its cross-layer transcoder (the one the page uses first) and the line's token ids, as
    the page traces them (the last 64 tokens of the row)."""
    les = L.load_file(L.LESSONS_DIR / f"{LID}.toml")
    assert les.steps[GRAPH_STEP].view == "circuits.graph"
    assert les.settings["preset"] == "checkpoint: shakespeare"
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    b = encode_batch(tok, les.settings["prompt"], model.config.block_size)
    ids = b.x[0, : b.lengths[0]].tolist()[-64:]
    return model, load_transcoder(transcoder_path("shakespeare", True)), ids


def test_a_group_made_on_step_4_is_switched_off_on_step_5_as_the_graph_and_the_model_say(line):
    model, tc, ids = line
    g = attribute(model, tc, ids, max_feature_nodes=1024)  # the page's settings: the most likely logits, 1024
    top = g.logit_index(0)  # the most probable target logit
    index = {node_id(g, i): i for i in range(g.n_features)}

    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["lesson"], at.query_params["lstep"] = LID, str(GRAPH_STEP + 1)
    at = clean(at.run())
    assert heading(at) == "The attribution graph"
    drawn = list(next(t for t in graph_spec(at)["data"] if t.get("name") == "features")["customdata"])
    assert drawn and set(drawn) <= set(index)
    # the drawn features with the strongest direct edges into the top logit: what the box tool would catch above
    # the token most big circles sit on, in the lesson's words; strong, so the change is well above rounding
    # (the weakest of them first: the feature step shows the first one selected, and it is not the graph's most
    # influential feature, which that step shows with nothing selected)
    picked = sorted(drawn, key=lambda n: -abs(float(g.adjacency[top, index[n]])))[:N_PICKED][::-1]
    at = clean(at.multiselect(key=f"{GRAPH_KEY}.chosen").set_value(picked).run())
    ring = next(t for t in graph_spec(at)["data"] if t.get("name") == "selected")  # ringed on the graph
    assert sorted(ring["customdata"]) == sorted(picked)

    at = clean(at.button(key="lessons.next").click().run())  # step 3, which does not draw the graph
    assert heading(at) == "What one feature does"
    layer, pos, feat = g.node(index[picked[0]])[1:4]  # the first one selected, not the graph's most influential
    assert not [c for c in at.caption if c.value.startswith("Nothing selected yet")]
    (shown,) = [h.value for h in at.subheader if h.value.startswith("Feature ")]
    assert shown.startswith(f"Feature L{layer} #{feat} at ") and shown.endswith(f"(position {pos})"), shown
    at = clean(at.button(key="lessons.next").click().run())
    assert heading(at) == "Group nodes into a supernode"
    vkey = f"L.{LID}.3"
    add = at.button(key=f"{vkey}.add")
    assert not add.disabled, "step 4 sees no selection: the graph's selection was lost after step 2"
    at.text_input(key=f"{vkey}.name").input(GROUP)
    at = clean(at.button(key=f"{vkey}.add").click().run())
    said = [rendered(m.value) for m in at.markdown if m.value.startswith(f"**{GROUP}**")]
    assert said == [f"**{GROUP}**: {N_PICKED} node(s), {N_PICKED} in this graph"]

    at = clean(at.button(key="lessons.next").click().run())
    assert heading(at) == "Switch the supernode off"
    vkey = f"L.{LID}.4"
    scale = at.slider(key=f"{vkey}.scale").value
    assert scale == 0.0  # the slider starts at 0: the features switched off
    assert at.selectbox(key=f"{vkey}.what").value == "selected"  # first: the selection made on step 2's graph
    selected = bars_of(at)
    at = clean(at.selectbox(key=f"{vkey}.what").set_value("group 0").run())  # then the group made on step 4
    predicted, real = bars_of(at)
    assert len(predicted) == len(real) == g.logit_ids.numel()
    assert (selected[0] == predicted).all() and (selected[1] == real).all()  # the same features

    # the graph's prediction: (scale - 1) times the direct edges from the group's features into the top logit
    want_predicted = (scale - 1.0) * sum(float(g.adjacency[top, index[n]]) for n in picked)
    # the model, as circuit-tracer's feature_intervention runs it by default (the page's default): its own MLPs, every
    # attention pattern held at its value on the line, and each of the group's features' decoder rows times (its
    # value, scale times its activation on the line, minus its activation in this run) added to the MLP outputs they
    # reach
    x = torch.tensor([ids])
    chosen = [tuple(int(v) for v in g.node(index[n])[1:4]) for n in picked]  # (layer, position, feature)
    before, on_line = plain_steered(model, x, tc)
    after, _ = plain_steered(model, x, tc, chosen, scale, on_line, hold_patterns=True)
    token = int(g.logit_ids[0])
    want_real = demeaned(after, token) - demeaned(before, token)

    assert abs(want_predicted) > 0.05 and abs(want_real) > 0.05  # the group matters: not a comparison of zeros
    assert predicted[0] == pytest.approx(want_predicted, rel=1e-4, abs=1e-5)
    assert real[0] == pytest.approx(want_real, rel=1e-4, abs=1e-4)

    # the other ways of computing it, chosen on the page
    at = clean(at.radio(key=f"{vkey}.mode").set_value("replacement").run())
    errors = mlp_errors(model, tc, x)
    layers = range(model.config.n_layer)
    spliced = plain_forward(model, x, tc, layers=layers, errors=errors, scaled=chosen, scale=scale)[0]
    want_spliced = demeaned(spliced, token) - demeaned(plain_forward(model, x, tc, layers=layers, errors=errors)[0],
                                                       token)
    predicted, real = bars_of(at)
    assert abs(want_spliced - want_real) > 1e-3  # a different number from the default's
    assert real[0] == pytest.approx(want_spliced, rel=1e-4, abs=1e-4)
    at = clean(at.radio(key=f"{vkey}.mode").set_value("direct").run())
    predicted, real = bars_of(at)
    assert real[0] == pytest.approx(want_predicted, rel=1e-3, abs=1e-5)
