"""The Circuits page: it opens on the Shakespeare GPT with its shipped cross-layer transcoder and draws the pruned
attribution graph of the text's last 64 tokens, node for node and edge for edge the graph that ``attribute`` and
``prune`` give when called here directly; the node threshold slider redraws it as ``prune`` with that threshold; a
model without a transcoder gets a plain message naming the one that has one; a feature's hover shows its label and
its strongest held-out snippet, both worked out here from the shipped files; a hostile group name stays text; hostile
texts and a missing interventions module leave the page working."""
import json
import sys

import pytest
import safetensors.torch
from apphelp import ROOT, messages
from streamlit.testing.v1 import AppTest

from gptviz.interp.attribution_graph import attribute
from gptviz.interp.graph_json import node_id
from gptviz.interp.graph_pruning import prune
from gptviz.interp.transcoder import load_transcoder, transcoder_path
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.present.figures.attribution_graph import DRAWN_EDGES, NEG_COLOR, POS_COLOR
from gptviz.text.batches import encode_batch

PAGE = "app_pages/circuits.py"
TITLE = "Attribution graph of"
NONE = "No transcoder ships for this model"
# longer than 64 tokens: the page reads the last 64
TEXT = ("First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First Citizen: You are all "
        "resolved rather to die than to famish?")
HOSTILE = "<img src=x onerror=alert(1)>"


def circuits(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / PAGE), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = str(v)
    return no_exception(at.run())


def no_exception(at):
    assert not at.exception, [e.message for e in at.exception]
    return at


def graph_spec(at) -> dict:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(s for s in specs if s["layout"]["title"]["text"].startswith(TITLE))


def drawn(spec) -> tuple[set, dict]:
    """(node ids of the markers, {(source id, target id): colour} of the lines), read from the chart's JSON."""
    at = {}
    for t in spec["data"]:
        if t.get("mode", "").startswith("markers") and t.get("name") != "selected":
            at.update({(x, y): c for x, y, c in zip(t["x"], t["y"], t["customdata"])})
    edges = {}
    for t in spec["data"]:
        if t.get("mode") == "lines":
            xs, ys = list(t["x"]), list(t["y"])
            for k in range(0, len(xs), 3):
                edges[at[xs[k], ys[k]], at[xs[k + 1], ys[k + 1]]] = t["line"]["color"]
    return set(at.values()), edges


@pytest.fixture(scope="module")
def engine():
    """The graph computed here, without the page: the model, its transcoder, the text's last 64 tokens."""
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    b = encode_batch(tok, TEXT, model.config.block_size)
    ids = b.x[0, : b.lengths[0]].tolist()[-64:]
    tc = load_transcoder(transcoder_path("shakespeare", True))
    return attribute(model, tc, ids, max_feature_nodes=1024)


def expected(g, node_threshold=0.8, edge_threshold=0.98) -> tuple[set, dict]:
    p = prune(g, node_threshold, edge_threshold)
    pairs = (p.edge_mask & p.node_mask[:, None] & p.node_mask[None, :]).nonzero().tolist()
    if len(pairs) > DRAWN_EDGES:  # the page draws the heaviest
        pairs = sorted(pairs, key=lambda ts: -abs(float(g.adjacency[ts[0], ts[1]])))[:DRAWN_EDGES]
    logits = range(g.n_nodes - g.logit_ids.numel(), g.n_nodes)
    nodes = {node_id(g, i) for ts in pairs for i in ts} | {node_id(g, i) for i in logits}
    edges = {(node_id(g, s), node_id(g, t)): POS_COLOR if g.adjacency[t, s] > 0 else NEG_COLOR for t, s in pairs}
    return nodes, edges


@pytest.fixture(scope="module")
def opened():
    return circuits(text=TEXT)  # the opening model: the Shakespeare GPT


def test_it_opens_on_the_shakespeare_gpt_and_draws_the_graph_prune_gives(opened, engine):
    assert NONE not in messages(opened)
    nodes, edges = drawn(graph_spec(opened))
    want_nodes, want_edges = expected(engine)
    assert nodes == want_nodes
    assert edges == want_edges
    said = " ".join(c.value for c in opened.caption)
    assert "over the last 64 tokens" in said and "left out" in said  # the cap, said
    assert "Replacement score" in [m.label for m in opened.metric]


def escaped(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_a_feature_nodes_hover_shows_its_label_and_strongest_snippet(opened):
    """Worked out from the shipped files' tensors: "fires on" the peak tokens of the feature's snippets, "promotes" the
    top logits of its decoder's last row through the final LayerNorm (centred, times its gain), and the strongest
    snippet's text just before its peak, the peak in bold between ‹ ›."""
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    model, tok = ck.model, ck.tokenizer
    tc = load_transcoder(transcoder_path("shakespeare", True))
    raw = safetensors.torch.load_file(str(CHECKPOINTS / "shakespeare.clt.transcoder.snippets.safetensors"))
    gain, W_U = model.transformer.ln_f.weight.detach().double(), model.lm_head.weight.detach().double()
    assert any("its label, made from" in c.value for c in opened.caption)  # the feature in view names it too
    feats = next(t for t in graph_spec(opened)["data"] if t.get("name") == "features")
    for node, hover in list(zip(feats["customdata"], feats["hovertext"]))[:8]:
        layer, feat, _ = map(int, node.split("_"))
        d = tc.W_dec[layer][feat, -1].detach().double()
        up = (W_U @ ((d - d.mean()) * gain)).topk(3).indices.tolist()
        peaks, first = [], None
        for j in range(raw[f"L{layer}.peak"].shape[1]):
            if raw[f"L{layer}.peak"][feat, j] <= 0:
                break
            n = int((raw[f"L{layer}.ids"][feat, j] >= 0).sum())
            ids = raw[f"L{layer}.ids"][feat, j, :n].tolist()
            p = int(raw[f"L{layer}.acts"][feat, j, :n].float().argmax())
            first = first or (tok.decode(ids[:p]).replace("\n", "↵")[-6:], tok.decode(ids[p:p + 1]))
            peaks += [tok.token_str(ids[p])] if tok.token_str(ids[p]) not in peaks else []
        fires, promotes = ", ".join(f"'{w}'" for w in peaks[:3]), ", ".join(f"'{tok.token_str(t)}'" for t in up)
        label = (f"fires on {fires}" if peaks else "never fires on the held-out text") + f" · promotes {promotes}"
        assert escaped(label) in hover.split("<br>"), (node, hover)
        if first:
            peak = first[1].replace(" ", "␣").replace("\n", "↵")
            assert f"{escaped(first[0])}<b>‹{escaped(peak)}›</b>" in hover, (node, hover)


def test_the_node_threshold_redraws_the_graph_as_prune_with_that_threshold(engine):
    at = circuits(text=TEXT)
    before, _ = drawn(graph_spec(at))
    at = no_exception(at.slider(key="circ.nodes").set_value(0.6).run())
    nodes, edges = drawn(graph_spec(at))
    assert (nodes, edges) == expected(engine, 0.6)
    assert len(nodes) < len(before)


def test_the_heaviest_edges_are_drawn_and_the_toggle_draws_every_kept_one(engine):
    p = prune(engine)
    kept = int((p.edge_mask & p.node_mask[:, None] & p.node_mask[None, :]).sum())
    assert kept > DRAWN_EDGES  # this text keeps more edges than are drawn at first
    at = circuits(text=TEXT)
    assert len(drawn(graph_spec(at))[1]) == DRAWN_EDGES
    assert any(f"the {DRAWN_EDGES} heaviest drawn" in str(c.value) for c in at.caption)
    at.toggle(key="circ.all_edges").set_value(True)
    no_exception(at.run())
    assert len(drawn(graph_spec(at))[1]) == kept


def test_a_model_without_a_transcoder_gets_a_plain_message():
    at = circuits(preset="default")
    assert NONE in messages(at)
    assert "Shakespeare GPT" in messages(at)  # where to find one
    assert not [c for c in at.get("plotly_chart")]


def test_an_attention_only_model_draws_its_graph_of_tokens_and_logits_without_a_transcoder():
    """The induction-heads model has no MLPs: the page draws, node for node and edge for edge, the graph that
    ``attribute(model, None, ids)`` and ``prune`` give when called here, tokens to logits, and says why there are no
    features; the feature and intervention sections say so instead of failing."""
    text = "Now is the winter. Now is the winter"
    at = circuits(preset="checkpoint: induction-heads", text=text)
    assert NONE not in messages(at) and "has no MLPs" in messages(at)
    ck = load_checkpoint(CHECKPOINTS / "induction-heads.safetensors")
    b = encode_batch(ck.tokenizer, text, ck.model.config.block_size)
    g = attribute(ck.model.eval(), None, b.x[0, : b.lengths[0]].tolist()[-64:])
    nodes, edges = drawn(graph_spec(at))
    assert (nodes, edges) == expected(g) and edges
    assert not [t for t in graph_spec(at)["data"] if t.get("name") in ("features", "errors")]
    assert "no features to scale" in messages(at) and "no features: its edges" in messages(at)


def test_a_hostile_group_name_is_escaped_wherever_it_is_shown():
    at = circuits(text=TEXT)
    feats = list(next(t for t in graph_spec(at)["data"] if t.get("name") == "features")["customdata"])[:2]
    at = no_exception(at.multiselect(key="circ.chosen").set_value(feats).run())  # the Group button is enabled
    at.text_input(key="circ.groups.name").input(HOSTILE)
    at = no_exception(at.button(key="circ.groups.add").click().run())
    assert at.session_state["gptviz.circuits.groups"] == [[HOSTILE, *feats]]
    shown = [m.value for m in at.markdown if "onerror" in m.value]
    assert shown and all("\\<img" in m for m in shown)  # Markdown-escaped: text, not a tag
    spec = json.dumps(graph_spec(at))
    assert "&lt;img src=x onerror=alert(1)&gt;" in spec and "<img" not in spec  # in the hover, escaped
    assert any(c.proto.spec and "the logits' change" in c.proto.spec for c in at.get("plotly_chart")) or \
        any("coming" in str(i.value) for i in at.info)  # an intervention on the selected features, when it exists
    at = no_exception(at.button(key="circ.groups.rm.0").click().run())
    assert at.session_state["gptviz.circuits.groups"] == []


def test_without_the_interventions_module_the_page_says_they_are_coming(monkeypatch):
    import gptviz.interp

    monkeypatch.setitem(sys.modules, "gptviz.interp.graph_interventions", None)  # its import fails
    monkeypatch.delattr(gptviz.interp, "graph_interventions", raising=False)
    at = circuits(text=TEXT)
    assert any("coming" in str(i.value) for i in at.info)
    graph_spec(at)  # the graph is drawn all the same


@pytest.mark.parametrize("text", ["", "<script>alert(1)</script> **bold** [x](http://e.com)",
                                  "ünïcode 😀 \x00\x1b", "a"], ids=["empty", "markup", "unicode", "one-token"])
def test_hostile_texts_leave_the_page_working(text):
    at = circuits(text=text)
    graph_spec(at)
    assert "<script>" not in " ".join(str(m.value) for m in at.markdown)
