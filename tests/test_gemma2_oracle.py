"""Gemma 2: a ``gemma2`` model folder opens, with a norm before AND after each sublayer (``ln1_post``, ``ln2_post``),
scores divided by √query_pre_attn_scalar, soft-capped attention scores (``hook_scores_capped``) and logits
(``hook_logits_raw`` before the cap), and a sliding window on every other layer.

Each check is against a computation that does not go through the code under test: Gemma 2 folders built here with
random weights (random norm offsets around 0, applied as 1 + w) against ``transformers``' own ``Gemma2ForCausalLM``
on the same folder (eager attention, ``output_attentions=True``), its norm modules' and head's outputs caught by
torch forward hooks, its own config class for the defaults; the capped scores against ``cap · tanh(s / cap)``
written here; the messages a user reads, written out whole."""
import json
import math

import pytest
import torch
from hf_models import build, compare, long_ids, two_rows
from lazy_import import lazy

import gptviz
from gptviz import GPT, ModelConfig, describe, trace
from gptviz.model.hook_names import act_name, act_names
from gptviz.model.pretrained import model_config

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip
tokenizers = pytest.importorskip("tokenizers")


# --------------------------------------------------------------------------- transformers' Gemma2ForCausalLM
@pytest.mark.parametrize("extra", [{}, {"attention_bias": True, "rms_norm_eps": 0.3, "num_key_value_heads": 4}],
                         ids=["default", "biases-big-eps-no-grouping"])
def test_a_gemma2_folder_matches_transformers(tmp_path, extra):
    """Logits within 1e-4 and every layer's pattern within 1e-5, one row and two rows with left padding, on a text of
    40 tokens where layers 0 and 2 see only their last 8 (the oracle's band is checked to be there)."""
    hf = build("gemma2", tmp_path, **extra)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.sublayer_norms, c.attn_scale_dim, c.attn_softcap, c.final_softcap, c.sliding_window,
            c.sliding_layers, c.d_head, c.activation, c.tie_weights) == \
        ("both", 20.0, 2.0, 3.0, 8, (0, 2), 12, "gelu_tanh", False)
    idx = torch.tensor([long_ids(tok, 40)])
    with torch.no_grad():
        att = hf(idx, output_attentions=True).attentions
    assert (att[0][0, :, 30, :23] == 0).all() and (att[1][0, :, 30, :23] > 0).all()  # layer 0 slides, 1 does not
    compare(hf, model, idx)
    compare(hf, model, *two_rows(tok))


def caught(hf, idx, mask=None) -> dict:
    """transformers' four norms of each layer and its LM head: their outputs on ``idx``, by torch forward hooks."""
    got, handles = {}, []
    for l, layer in enumerate(hf.model.layers):
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            def hook(module, args, out, key=(name, l)):
                got[key] = out.detach().clone()
            handles.append(getattr(layer, name).register_forward_hook(hook))
    handles.append(hf.lm_head.register_forward_hook(lambda m, a, out: got.__setitem__("lm_head", out.detach())))
    try:
        with torch.no_grad():
            got["logits"] = hf(idx, attention_mask=mask).logits
    finally:
        for h in handles:
            h.remove()
    return got


def test_the_four_norms_and_the_raw_logits_are_transformers_own(tmp_path):
    """``ln1``/``ln1_post``/``ln2``/``ln2_post``'s outputs are transformers' input_layernorm, post_attention_layernorm,
    pre_feedforward_layernorm and post_feedforward_layernorm outputs (within 1e-5); ``hook_attn_out`` is the post
    norm's output (what is added to the stream); ``hook_logits_raw`` the LM head's output before the cap."""
    hf = build("gemma2", tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    for idx, mask in [(torch.tensor([long_ids(tok, 40)]), None), two_rows(tok)]:
        got = caught(hf, idx, mask)
        tr = trace(model, idx, attention_mask=mask)
        real = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask.bool()
        for l in range(4):
            for part, theirs in (("ln1", "input_layernorm"), ("ln1_post", "post_attention_layernorm"),
                                 ("ln2", "pre_feedforward_layernorm"), ("ln2_post", "post_feedforward_layernorm")):
                ours = tr[act_name("out", l, part)]
                assert (ours - got[(theirs, l)])[real].abs().max().item() < 1e-5, (part, l)
            assert torch.equal(tr[act_name("attn_out", l)], tr[act_name("out", l, "ln1_post")])
            assert torch.equal(tr[act_name("mlp_out", l)], tr[act_name("out", l, "ln2_post")])
        assert (tr["hook_logits_raw"] - got["lm_head"])[real].abs().max().item() < 1e-4
        assert (tr["hook_logits"] - got["logits"])[real].abs().max().item() < 1e-4
        # the cap bites on these logits: without it the comparison above could not pass
        assert (got["lm_head"] - got["logits"])[real].abs().max().item() > 0.5


def test_the_capped_scores_are_cap_tanh_of_the_scores_over_root_query_pre_attn_scalar(tmp_path):
    """By hand from the recorded steps: scaled = raw / √20 (query_pre_attn_scalar, not √head_dim = √12), capped =
    2 · tanh(scaled / 2), and the mask then the softmax read the capped scores."""
    build("gemma2", tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    tr = trace(model, torch.tensor([long_ids(tok, 40)]))
    for l in range(4):
        raw, scaled = tr[act_name("scores_raw", l)].double(), tr[act_name("scores_scaled", l)].double()
        capped = tr[act_name("scores_capped", l)].double()
        assert (scaled - raw / math.sqrt(20)).abs().max().item() < 1e-5
        assert (capped - 2.0 * torch.tanh(scaled / 2.0)).abs().max().item() < 1e-6
        assert capped.abs().max().item() < 2.0 < scaled.abs().max().item()  # the cap bites
        allowed = torch.isfinite(tr[act_name("attn_scores", l)])
        assert torch.equal(tr[act_name("attn_scores", l)][allowed], tr[act_name("scores_capped", l)][allowed])
    assert torch.allclose(tr["hook_logits"], 3.0 * torch.tanh(tr["hook_logits_raw"] / 3.0), atol=1e-6)


# --------------------------------------------------------------------------- config.json
GEMMA2 = {"model_type": "gemma2", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 3,
          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "max_position_embeddings": 64}


def opened(tmp_path, d: dict) -> ModelConfig:
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg, family = model_config(tmp_path)
    assert family == d["model_type"]
    return cfg


def test_a_saved_config_and_an_older_hand_written_one_open_to_the_same_model(tmp_path):
    """transformers 5's save (rope_parameters, layer_types) and an older config.json written here (rope_theta at the
    top, no layer_types: every other layer slides, from layer 0) give the same ModelConfig; its every field by hand."""
    build("gemma2", tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 500.0}, num_hidden_layers=3)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "rope_parameters" in saved and "rope_theta" not in saved and saved["layer_types"] == [
        "sliding_attention", "full_attention", "sliding_attention"]
    new = model_config(tmp_path)[0]
    old = {"model_type": "gemma2", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 48,
           "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
           "max_position_embeddings": 64, "query_pre_attn_scalar": 20, "sliding_window": 8, "rope_theta": 500.0,
           "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0, "hidden_act": "gelu_pytorch_tanh",
           "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "cache_implementation": "hybrid"}
    assert opened(tmp_path, old) == new == ModelConfig(
        vocab_size=300, block_size=64, n_layer=3, n_head=4, n_kv_head=2, n_embd=32, d_head=12, d_mlp=48,
        norm="rmsnorm", pos_encoding="rope", rope_base=500.0, activation="gelu_tanh", gated_mlp=True, bias=False,
        tie_weights=False, ln_eps=1e-6, sliding_window=8, sliding_layers=(0, 2), sublayer_norms="both",
        attn_scale_dim=20.0, attn_softcap=2.0, final_softcap=3.0)


def test_the_keys_a_gemma2_config_leaves_out_take_transformers_defaults(tmp_path):
    t = transformers.Gemma2Config(num_hidden_layers=3)
    cfg = opened(tmp_path, GEMMA2)
    assert (cfg.attn_scale_dim, cfg.attn_softcap, cfg.final_softcap, cfg.sliding_window, cfg.rope_base,
            cfg.ln_eps) == (t.query_pre_attn_scalar, t.attn_logit_softcapping, t.final_logit_softcapping,
                            t.sliding_window, t.rope_parameters["rope_theta"], t.rms_norm_eps)
    assert cfg.sliding_layers == tuple(i for i, k in enumerate(t.layer_types) if k == "sliding_attention") == (0, 2)
    assert (cfg.activation, cfg.qkv_bias, cfg.qk_norm) == ("gelu_tanh", t.attention_bias, False)
    nulls = opened(tmp_path, {**GEMMA2, "attn_logit_softcapping": None, "final_logit_softcapping": None})
    assert (nulls.attn_softcap, nulls.final_softcap) == (None, None)  # null: no cap, as transformers reads it


@pytest.mark.parametrize("change, message", [
    ({"sliding_window": None},
     "config.json has sliding_attention layers but sliding_window=null: give the window's width (sliding_window), or "
     "make every layer full_attention (layer_types)"),
    ({"layer_types": ["full_attention"] * 2},
     "config.json's layer_types=['full_attention', 'full_attention'] must be a list of 3 (num_hidden_layers) layer "
     "types, each 'full_attention' or 'sliding_attention'"),
    ({"attn_logit_softcapping": 0}, "config.json's attn_logit_softcapping=0 must be above 0"),
    ({"final_logit_softcapping": -30.0}, "config.json's final_logit_softcapping=-30.0 must be above 0"),
    ({"query_pre_attn_scalar": 0}, "config.json's query_pre_attn_scalar=0 must be above 0"),
    ({"query_pre_attn_scalar": "256"}, "config.json's query_pre_attn_scalar='256' must be a finite number"),
    ({"use_bidirectional_attention": True},
     "use_bidirectional_attention=true is not supported: gptviz computes causal attention"),
    ({"tie_word_embeddings": False},
     "tie_word_embeddings=false is not supported for Gemma 2 and 3: gptviz opens Gemma with its unembedding tied to "
     "its embedding table, as every released Gemma 2 and 3 is"),
    ({"head_dim": None}, "config.json lacks 'head_dim', which a gemma2 model needs"),
    ({"head_dim": 3}, "d_head=3 must be even when pos_encoding='rope': rotary embeddings turn pairs of dimensions "
                      "(in config.json: d_head is head_dim)"),
    ({"hidden_activation": "gelu_new2"},
     "hidden_activation='gelu_new2' has no gptviz equivalent (gptviz has gelu, gelu_fast, gelu_new, "
     "gelu_pytorch_tanh, relu, silu, swish, tanh)"),
])
def test_a_bad_gemma2_config_is_refused_with_the_message_a_user_reads(tmp_path, change, message):
    d = {k: v for k, v in {**GEMMA2, **change}.items() if v is not None or k == "sliding_window"}
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ValueError) as exc:
        model_config(tmp_path)
    assert str(exc.value) == message


def test_a_missing_post_norm_weight_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    build("gemma2", tmp_path)
    sd = dict(load_file(str(tmp_path / "model.safetensors")))
    sd.pop("model.layers.2.post_feedforward_layernorm.weight")
    save_file(sd, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError) as exc:
        gptviz.from_pretrained(tmp_path)
    assert str(exc.value) == "the weights lack model.layers.2.post_feedforward_layernorm.weight, which this gemma2 " \
                             "config.json asks for"


# --------------------------------------------------------------------------- the engine's steps
CAP = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, d_head=6, norm="rmsnorm",
                  pos_encoding="rope", gated_mlp=True, bias=False, sublayer_norms="both", attn_scale_dim=9,
                  attn_softcap=1.5, final_softcap=2.5)


def ids(cfg, B: int = 2, T: int = 6) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(3))


def test_the_hook_names_of_gemma2_spelt_out_in_compute_order():
    tr = trace(GPT(CAP), ids(CAP), targets=ids(CAP))
    assert act_names(CAP, targets=True) == list(tr)
    block0 = [n for n in tr if n.startswith("blocks.0.")]
    assert [n[len("blocks.0."):] for n in block0] == [
        "hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized", "ln1.hook_out", "attn.hook_qkv", "attn.hook_q",
        "attn.hook_k", "attn.hook_v", "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_k_rep", "attn.hook_v_rep",
        "attn.hook_scores_raw", "attn.hook_scores_scaled", "attn.hook_scores_capped", "attn.hook_attn_scores",
        "attn.hook_pattern", "attn.hook_z", "ln1_post.hook_scale", "ln1_post.hook_normalized", "ln1_post.hook_out",
        "hook_attn_out", "hook_resid_mid", "ln2.hook_scale", "ln2.hook_normalized", "ln2.hook_out", "mlp.hook_pre",
        "mlp.hook_pre_linear", "mlp.hook_post", "ln2_post.hook_scale", "ln2_post.hook_normalized",
        "ln2_post.hook_out", "hook_mlp_out", "hook_resid_post"]
    assert [n for n in tr if not n.startswith("blocks.")] == [
        "hook_embed", "ln_final.hook_scale", "ln_final.hook_normalized", "ln_final.hook_out", "hook_logits_raw",
        "hook_logits", "hook_probs", "hook_loss_per_token", "hook_loss"]
    plain = CAP.replace(attn_softcap=None, final_softcap=None, sublayer_norms="before")
    assert not [n for n in act_names(plain) if "capped" in n or "_post." in n or n == "hook_logits_raw"]


def test_every_new_step_has_its_words_its_facts_and_its_source_line():
    tr = trace(GPT(CAP), ids(CAP))
    capped = describe(act_name("scores_capped", 1), CAP)
    assert (capped.title, capped.formula) == ("L1 scores soft-capped",
                                              r"\tilde{S}_{ij} = 1.5\,\tanh\!\bigl(S_{ij}/\sqrt{9} \,/\, 1.5\bigr)")
    assert (capped.kind, capped.signed, capped.axes) == ("signed", True, ("batch", "head", "query_pos", "key_pos"))
    assert capped.code == "att = self.hook_scores_capped(torch.tanh(att / self.softcap) * self.softcap, rec)  " \
                          "# (B, nh, T, S)"
    assert describe(act_name("scores_scaled", 0), CAP).formula == r"S_h / \sqrt{s_q} = S_h / \sqrt{9}"
    raw = describe("hook_logits_raw", CAP)
    assert (raw.title, raw.stage, raw.code.splitlines()) == ("logits before the cap", "output", [
        "logits = self.lm_head(x)",
        "logits = torch.tanh(self.hook_logits_raw(logits, rec) / cfg.final_softcap) * cfg.final_softcap  # (B, T, V)"])
    assert describe("hook_logits", CAP).formula == r"\mathrm{logits} = 2.5\,\tanh(z / 2.5)"
    post = describe(act_name("out", 0, "ln2_post"), CAP)
    assert (post.title, post.stage, post.code.splitlines()[-1]) == ("L0 LN₂ post output", "norm",
                                                                     "return self.hook_out(x, rec)  # (B, T, C)")
    for name in tr:  # every step has words and code
        info = describe(name, CAP)
        assert info.title and info.formula and info.explanation and info.code, name


def test_a_capped_scores_heatmap_is_diverging_around_0():
    from gptviz.present import figures
    from gptviz.present.matrices import step_matrix

    tr = trace(GPT(CAP), ids(CAP))
    name = act_name("scores_capped", 0)
    m = step_matrix(tr[name].numpy(), describe(name, CAP), [str(i) for i in range(6)], 0, head=1)
    fig = figures.heatmap(m, "capped")
    z = fig.data[0]
    assert (z.zmid, z.zmin) == (0.0, -z.zmax) and 0 < z.zmax <= 1.5


def test_a_capped_model_is_never_slimmed_and_a_scaled_one_is_worked_out_bit_for_bit():
    tr = trace(GPT(CAP), ids(CAP), slim=True)
    assert not tr.slim and act_name("scores_capped", 0) in tr
    assert CAP.trace_bytes(2, 6, slim=True) == CAP.trace_bytes(2, 6)
    scaled = CAP.replace(attn_softcap=None)
    full, slim = trace(GPT(scaled), ids(scaled)), trace(GPT(scaled), ids(scaled), slim=True)
    assert slim.slim
    for l in range(2):
        for step in ("scores_raw", "scores_scaled", "attn_scores"):
            assert torch.equal(torch.as_tensor(slim[act_name(step, l)]), full[act_name(step, l)]), step


def test_the_attention_page_lists_the_capped_scores_after_the_scaled_ones():
    pytest.importorskip("streamlit")
    from gptviz.ui.sections.attention import attention_steps as page_steps

    steps = page_steps(CAP, 1)
    names = [n for _, n in steps]
    at = names.index(act_name("scores_scaled", 1))
    assert names[at + 1:at + 3] == [act_name("scores_capped", 1), act_name("attn_scores", 1)]
    assert steps[at] == ("5 · Scale by 1/√9 (query_pre_attn_scalar)", act_name("scores_scaled", 1))
    assert steps[at + 1][0] == "5b · Soft-cap: 1.5 · tanh(score / 1.5)"
    assert names[-4:] == [act_name("scale", 1, "ln1_post"), act_name("normalized", 1, "ln1_post"),
                          act_name("attn_out", 1), act_name("resid_mid", 1)]


@pytest.mark.parametrize("change, message", [
    ({"attn_softcap": 0.0}, "attn_softcap=0.0 must be above 0, or None"),
    ({"final_softcap": float("inf")}, "final_softcap=inf must be a finite number, or None"),
    ({"attn_scale_dim": True}, "attn_scale_dim=True must be a finite number, or None"),
    ({"sublayer_norms": "around"}, "sublayer_norms='around' must be one of 'before', 'both', 'after'"),
    ({"norm_placement": "post"}, "sublayer_norms='both' needs a decoder-only model with norm_placement='pre' and no "
                                 "parallel_attn: the norms after a sublayer sit inside its residual branch"),
])
def test_the_config_refuses_bad_gemma2_fields_naming_what_to_change(change, message):
    with pytest.raises(ValueError) as exc:
        CAP.replace(**change)
    assert str(exc.value) == message


def test_the_gemma2_fields_survive_json_and_count_their_parameters():
    assert ModelConfig.from_dict(json.loads(CAP.to_json())) == CAP
    assert CAP.num_params() == GPT(CAP).num_params() == CAP.replace(sublayer_norms="before").num_params() + 2 * 2 * 16


def test_the_logit_lens_caps_as_the_model_does_and_the_additive_splits_are_refused():
    """The lens's last point is the trace's (capped) logits; direct logit attribution and the contribution graph,
    which split attention into heads, refuse a model whose sublayer outputs are normalised as a whole."""
    from gptviz.interp import lens
    from gptviz.interp.contributions import Contributions

    model = GPT(CAP)
    tr = trace(model, ids(CAP), targets=ids(CAP))
    _, logits = lens.logit_lens(tr, model)
    assert torch.equal(logits[-1], tr["hook_logits"]) and logits.abs().max().item() <= 2.5
    with pytest.raises(ValueError) as exc:
        lens.decompose(tr, model)
    assert str(exc.value) == "direct logit attribution splits attention into heads, but this model normalises each " \
        "sublayer's output as a whole (a norm after it: Gemma 2 and 3, OLMo 2), so the heads' shares do not add up " \
        "to what attention wrote"
    with pytest.raises(ValueError) as exc:
        Contributions(model, tr)
    assert str(exc.value) == "the contribution graph splits each sublayer's output into the parts that wrote it, " \
        "but this model normalises that output as a whole before adding it (a norm after each sublayer: Gemma 2 " \
        "and 3, OLMo 2), so the parts do not add up to it"


def test_a_switched_off_head_s_capped_scores_get_no_gradient_and_a_checkpoint_keeps_the_fields(tmp_path):
    from gptviz import CharBPETokenizer
    from gptviz.model.checkpoint import load_checkpoint, save_checkpoint
    from gptviz.run import edits

    model = GPT(CAP)
    spec = {"heads_off": [[0, 1]]}
    tr = trace(model, ids(CAP), targets=ids(CAP), edits=edits.from_spec(spec, 2, 4), grads=True)
    g = tr.grad(act_name("scores_capped", 0))
    assert g[:, 1].abs().max() == 0 and g[:, 0].abs().max() > 0
    assert "capped scores" in edits.switched_off_reading(tr, act_name("pattern", 0), spec)
    save_checkpoint(tmp_path / "g.safetensors", model, CharBPETokenizer(0).train(["abcabc"]))
    ck = load_checkpoint(tmp_path / "g.safetensors")
    assert ck.config == CAP
    assert torch.equal(trace(ck.model, ids(CAP))["hook_logits"], trace(model, ids(CAP))["hook_logits"])
