"""Mixtral, Qwen2-MoE, OLMoE and GPT-OSS folders (issue 38) against ``transformers``' own models on the same folder:
logits within 1e-4, every attention pattern within 1e-5, and each layer's routing (the router's logits and the
weights of the chosen experts, caught with torch forward hooks on transformers' routers), one row and two rows with
left padding; the shared expert's and QK-norm's outputs caught by hooks; GPT-OSS's sinks checked as a softmax over
the scores with one more column, written out here; the messages a user reads, whole."""
import json

import numpy as np
import pytest
import torch
from hf_models import build, compare, long_ids, two_rows
from lazy_import import lazy

import gptviz
from gptviz import trace
from gptviz.model.hook_names import act_name

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip
tokenizers = pytest.importorskip("tokenizers")


def routers(hf, idx, mask=None) -> dict:
    """transformers' router outputs per layer, caught by forward hooks: (logits, scores, indices)."""
    got, handles = {}, []
    for l, layer in enumerate(hf.model.layers):
        mlp = getattr(layer, "block_sparse_moe", None) or layer.mlp
        r = getattr(mlp, "gate", None) if not hasattr(mlp, "router") else mlp.router
        if r is None or not hasattr(r, "top_k"):
            continue
        handles.append(r.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(l, o)))
    with torch.no_grad():
        hf(idx, attention_mask=mask)
    for h in handles:
        h.remove()
    return got


def check_routing(hf, model, idx, mask=None):
    tr = trace(model, idx, attention_mask=mask)
    got = routers(hf, idx, mask)
    assert sorted(got) == [l for l in range(model.config.n_layer) if model.config.is_moe_layer(l)]
    real = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask.bool()
    for l, (logits, scores, indices) in got.items():
        E = model.config.n_expert
        keep = real.reshape(-1)  # a padded position's routing is transformers' own business
        ours = torch.as_tensor(np.asarray(tr[act_name("router_logits", l)])).reshape(-1, E)
        assert torch.allclose(ours[keep], logits[keep], atol=1e-5)
        w = torch.zeros(logits.shape[0], E).scatter(-1, indices, scores)
        ours_w = torch.as_tensor(np.asarray(tr[act_name("expert_weights", l)])).reshape(-1, E)
        assert torch.allclose(ours_w[keep], w[keep], atol=1e-6), l


@pytest.mark.parametrize("extra", [{}, {"sliding_window": 8}, {"tie_word_embeddings": True}])
def test_a_mixtral_folder_matches_transformers(tmp_path, extra):
    """Logits and every pattern (one row; two rows, left-padded), and each layer's router logits and the weights of
    the chosen experts; a sliding window shorter than the 40-token text."""
    hf = build("mixtral", tmp_path, **extra)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.n_expert, c.n_expert_active, c.d_expert, c.expert_renorm, c.moe_layers, c.sliding_window) == \
        (4, 2, 24, True, None, extra.get("sliding_window"))
    one = torch.tensor([long_ids(tok, 40)])
    compare(hf, model, one)
    compare(hf, model, *two_rows(tok))
    check_routing(hf, model, one)
    check_routing(hf, model, *two_rows(tok))
    assert "4 experts 24 wide, each token routed to 2" in model.family_note


@pytest.mark.parametrize("renorm", [False, True])
def test_a_qwen2_moe_folder_matches_transformers(tmp_path, renorm):
    """Layer 0 dense (mlp_only_layers), 1 and 2 mixtures with a shared expert; norm_topk_prob both ways."""
    hf = build("qwen2_moe", tmp_path, norm_topk_prob=renorm)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.n_expert, c.d_expert, c.d_shared_expert, c.moe_layers, c.expert_renorm, c.d_mlp, c.qkv_bias) == \
        (6, 16, 20, (1, 2), renorm, 40, True)
    compare(hf, model, torch.tensor([long_ids(tok, 40)]))
    compare(hf, model, *two_rows(tok))
    check_routing(hf, model, *two_rows(tok))
    got = {}
    hf.model.layers[2].mlp.shared_expert.register_forward_hook(lambda m, i, o: got.__setitem__("s", o))
    gate = hf.model.layers[2].mlp.shared_expert_gate
    gate.register_forward_hook(lambda m, i, o: got.__setitem__("g", o))
    one = torch.tensor([long_ids(tok, 40)])
    with torch.no_grad():
        hf(one)
    tr = trace(model, one)
    assert torch.allclose(torch.as_tensor(np.asarray(tr[act_name("shared_out", 2)]))[0],
                          torch.sigmoid(got["g"]) * got["s"], atol=1e-5)


def test_a_qwen2_moe_folder_without_a_mixture_says_to_open_it_as_qwen2(tmp_path):
    build("qwen2_moe", tmp_path, decoder_sparse_step=4)
    with pytest.raises(ValueError) as err:
        gptviz.from_pretrained(tmp_path)
    assert str(err.value) == ("config.json's decoder_sparse_step and mlp_only_layers leave no layer with experts: it "
                              "is a dense Qwen2 model; give it model_type 'qwen2'")


def test_a_gpt_oss_folder_matches_transformers_with_its_sinks(tmp_path):
    """Sinks, q/k/v/o biases, router and expert biases, the clamped gated unit, interleaved gate/up, YaRN, and a
    window of 8 on layer 0 only: logits, patterns, routing; each row's weights plus the sink's sum to 1."""
    hf = build("gpt_oss", tmp_path)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.attn_sinks, c.router_bias, c.expert_bias, c.activation, c.sliding_layers, c.rope_type) == \
        (True, True, True, "gpt_oss_glu", (0,), "yarn")
    with torch.no_grad():  # sinks away from 0 and some gate/up values past the clamp (7), so a missed one shows
        for layer in hf.model.layers:
            layer.self_attn.sinks.copy_(torch.linspace(-1.0, 2.0, 4))
            layer.mlp.experts.gate_up_proj.mul_(25.0)
    hf.save_pretrained(str(tmp_path))
    model, tok = gptviz.from_pretrained(tmp_path)
    one = torch.tensor([long_ids(tok, 40)])
    compare(hf, model, one)
    compare(hf, model, *two_rows(tok))
    check_routing(hf, model, one)
    tr = trace(model, one)
    pattern = np.asarray(tr[act_name("pattern", 1)])
    sink = np.asarray(tr[act_name("sink", 1)])
    assert np.allclose(pattern.sum(-1) + sink[..., 0], 1.0, atol=1e-6) and (sink > 0).all() and sink.max() > 0.5
    scores = torch.as_tensor(np.asarray(tr[act_name("attn_scores", 1)]))
    sinks = hf.model.layers[1].self_attn.sinks.detach()
    by_hand = torch.cat([scores, sinks.view(1, 4, 1, 1).expand(1, 4, 40, 1)], -1).softmax(-1)
    assert torch.allclose(torch.as_tensor(pattern), by_hand[..., :-1], atol=1e-6)


def test_a_quantised_gpt_oss_folder_is_refused_before_its_weights_are_read(tmp_path):
    build("gpt_oss", tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**d, "quantization_config": {"quant_method": "mxfp4"}}))
    with pytest.raises(ValueError) as err:
        gptviz.from_pretrained(tmp_path)
    assert str(err.value) == ("config.json has a quantization_config (GPT-OSS is released in MXFP4): gptviz reads "
                              "float weights only; load the model in transformers (which dequantises it) and "
                              "save_pretrained it")


@pytest.mark.parametrize("renorm", [False, True])
def test_an_olmoe_folder_matches_transformers(tmp_path, renorm):
    """QK-norm over the whole query and key projections (its modules' outputs caught by hooks) and 6 experts, top-3,
    with norm_topk_prob both ways: logits, patterns and routing, one row and two left-padded rows."""
    hf = build("olmoe", tmp_path, norm_topk_prob=renorm)
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.qk_norm, c.qk_norm_full, c.n_expert, c.n_expert_active, c.expert_renorm) == (True, True, 6, 3, renorm)
    one = torch.tensor([long_ids(tok, 40)])
    compare(hf, model, one)
    compare(hf, model, *two_rows(tok))
    check_routing(hf, model, *two_rows(tok))
    got = {}
    hf.model.layers[1].self_attn.k_norm.register_forward_hook(lambda m, i, o: got.__setitem__("k", o))
    with torch.no_grad():
        hf(one)
    ours = torch.as_tensor(np.asarray(trace(model, one)[act_name("k_normed", 1)]))  # (1, T, nkv, hs)
    assert torch.allclose(ours.reshape(1, 40, -1), got["k"], atol=1e-5)


def test_an_olmoe_folder_that_clips_qkv_is_refused(tmp_path):
    build("olmoe", tmp_path, clip_qkv=8.0)
    with pytest.raises(ValueError) as err:
        gptviz.from_pretrained(tmp_path)
    assert str(err.value) == ("config.json's clip_qkv=8.0 is not supported: gptviz does not clamp queries, keys and "
                              "values (OLMoE-1B-7B has clip_qkv null)")
