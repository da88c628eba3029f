"""Mixtures of experts (issue 38): gptviz's MoE GPT against a hand-written router and experts (the families against
transformers are in tests/test_moe_families_oracle.py).

Independent computations only: the oracle below computes every expert on every token with plain tensor algebra and
keeps the top k by a sort (not ``topk``, not gptviz's dispatch); the load and the top-routed tokens are counted and
sorted here; the load-balancing loss is written out from its definition."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lazy_import import lazy

from gptviz import GPT, ModelConfig, trace
from gptviz.interp.experts import (
    expert_load,
    held_out_windows,
    load_from_weights,
    moe_layers,
    top_routed,
    top_routed_windows,
)
from gptviz.model.checkpoint import load_checkpoint, save_checkpoint
from gptviz.model.experts import load_balance_loss
from gptviz.model.hook_names import act_name, act_names, mlp_steps, parse_act_name
from gptviz.run import edits

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip
tokenizers = pytest.importorskip("tokenizers")


def small_moe(**kw) -> GPT:
    cfg = dict(vocab_size=40, block_size=24, n_layer=2, n_head=2, n_embd=16, n_expert=5, n_expert_active=2, d_expert=8,
               seed=3)
    model = GPT(ModelConfig(**{**cfg, **kw}))
    with torch.no_grad():  # biases and gains away from their initial 0 and 1, so a dropped one shows
        g = torch.Generator().manual_seed(7)
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model


def oracle_moe(mlp, x, off=()):
    """One mixture layer by hand: every expert on every token, the router's top k by sorting the probabilities
    (``off`` experts excluded), renormalised if the config says so, and the weighted sum."""
    cfg = mlp.config
    W_r = mlp.router.weight
    logits = x @ W_r.T + (mlp.router.bias if mlp.router.bias is not None else 0)
    for e in off:
        logits = logits.clone()
        logits[..., e] = float("-inf")
    probs = logits.softmax(-1)
    order = probs.argsort(dim=-1, descending=True, stable=True)[..., :cfg.n_expert_active]
    keep = torch.zeros_like(probs).scatter(-1, order, 1.0)
    w = probs * keep
    if cfg.expert_renorm:
        w = w / w.sum(-1, keepdim=True)
    outs = []
    for e in range(cfg.n_expert):
        u = x @ mlp.c_fc.weight[e].T + (mlp.c_fc.bias[e] if mlp.c_fc.bias is not None else 0)
        if hasattr(mlp, "c_gate"):
            g = x @ mlp.c_gate.weight[e].T + (mlp.c_gate.bias[e] if mlp.c_gate.bias is not None else 0)
            h = F.silu(g) * u
        else:
            h = F.gelu(u, approximate="tanh")
        outs.append(h @ mlp.c_proj.weight[e].T + (mlp.c_proj.bias[e] if mlp.c_proj.bias is not None else 0))
    out = torch.stack(outs, dim=-2)  # (B, T, E, C)
    return logits, probs, w, out, (w[..., None] * out).sum(-2)


def rows_with_padding():
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 40, (3, 20), generator=g)
    mask = torch.ones_like(idx)
    mask[2, :6] = 0
    return idx, mask


# --------------------------------------------------------------------------- gptviz's own MoE GPT, by hand
@pytest.mark.parametrize("kw", [dict(), dict(gated_mlp=True, activation="silu", expert_renorm=False,
                                             router_bias=True, expert_bias=True, n_expert_active=3)])
def test_every_step_of_a_mixture_equals_a_hand_written_router_and_experts(kw):
    """Each layer's router logits, probabilities, weights (the chosen experts' only), each expert's output where
    chosen, and mlp_out, on three rows (the third left-padded): against the oracle run on the recorded ln2 output."""
    model = small_moe(**kw)
    idx, mask = rows_with_padding()
    tr = trace(model, idx, attention_mask=mask)
    for layer in range(2):
        x = torch.as_tensor(np.asarray(tr[act_name("out", layer, "ln2")]))
        logits, probs, w, out, y = oracle_moe(model.transformer.h[layer].mlp, x)
        ours = {s: torch.as_tensor(np.asarray(tr[act_name(s, layer)])) for s in mlp_steps(model.config, layer)}
        assert torch.allclose(ours["router_logits"], logits, atol=1e-5)
        assert torch.allclose(ours["router_probs"], probs, atol=1e-6)
        assert torch.allclose(ours["expert_weights"], w, atol=1e-6)
        assert ((ours["expert_weights"] > 0).sum(-1) == model.config.n_expert_active).all()
        chosen = w > 0
        assert torch.allclose(ours["expert_out"][chosen], out[chosen], atol=1e-5)
        assert (ours["expert_out"][~chosen] == 0).all()  # an expert not chosen for a token never ran on it
        assert torch.allclose(torch.as_tensor(np.asarray(tr[act_name("mlp_out", layer)])), y, atol=1e-5)
    assert [n for n in act_names(model.config) if ".mlp." in n][:4] == [
        "blocks.0.mlp.hook_router_logits", "blocks.0.mlp.hook_router_probs", "blocks.0.mlp.hook_expert_weights",
        "blocks.0.mlp.hook_expert_out"]
    assert list(tr) == act_names(model.config)
    assert parse_act_name("blocks.1.mlp.hook_expert_out").step == "expert_out"


def test_a_plain_forward_equals_the_trace_and_the_parameter_count_is_the_models():
    model = small_moe(d_shared_expert=12, gated_mlp=True, activation="silu", moe_layers=[1], n_layer=3)
    idx, mask = rows_with_padding()
    assert torch.equal(model(idx, attention_mask=mask)[0], torch.as_tensor(np.asarray(trace(model, idx,
                                                                              attention_mask=mask)["hook_logits"])))
    assert model.config.num_params() == sum(p.numel() for p in model.parameters())
    assert not hasattr(model.transformer.h[0].mlp, "router") and hasattr(model.transformer.h[1].mlp, "router")
    assert mlp_steps(model.config, 0) == ("pre", "pre_linear", "post")
    assert mlp_steps(model.config, 1)[-2:] == ("shared_gate", "shared_out")


def test_the_shared_expert_adds_its_sigmoid_gated_output():
    model = small_moe(d_shared_expert=12, gated_mlp=True, activation="silu")
    idx, _ = rows_with_padding()
    tr = trace(model, idx)
    mlp = model.transformer.h[1].mlp
    x = torch.as_tensor(np.asarray(tr[act_name("out", 1, "ln2")]))
    *_, routed = oracle_moe(mlp, x)
    s = mlp.shared
    gate = torch.sigmoid(x @ mlp.shared_gate.weight.T)
    shared = (F.silu(x @ s.c_gate.weight.T) * (x @ s.c_fc.weight.T)) @ s.c_proj.weight.T
    assert torch.allclose(torch.as_tensor(np.asarray(tr[act_name("shared_gate", 1)])), gate, atol=1e-6)
    assert torch.allclose(torch.as_tensor(np.asarray(tr[act_name("mlp_out", 1)])), routed + gate * shared, atol=1e-5)


def test_switching_an_expert_off_routes_each_token_to_the_best_experts_left():
    model = small_moe()
    idx, mask = rows_with_padding()
    before = trace(model, idx, attention_mask=mask)
    spec = {"set": [], "heads_off": [], "experts_off": [[1, 2], [1, 4]]}
    tr = trace(model, idx, attention_mask=mask, edits=edits.from_spec(spec, 2, 2, model.config))
    w = np.asarray(tr[act_name("expert_weights", 1)])
    assert (w[..., [2, 4]] == 0).all() and ((w > 0).sum(-1) == 2).all()
    assert np.isneginf(np.asarray(tr[act_name("router_logits", 1)])[..., [2, 4]]).all()
    assert (np.asarray(tr[act_name("router_probs", 1)])[..., [2, 4]] == 0).all()  # shown as probability 0
    x = torch.as_tensor(np.asarray(tr[act_name("out", 1, "ln2")]))
    *_, y = oracle_moe(model.transformer.h[1].mlp, x, off=(2, 4))
    assert torch.allclose(torch.as_tensor(np.asarray(tr[act_name("mlp_out", 1)])), y, atol=1e-5)
    assert np.array_equal(np.asarray(tr[act_name("mlp_out", 0)]), np.asarray(before[act_name("mlp_out", 0)]))
    assert (np.asarray(before[act_name("expert_weights", 1)])[..., [2, 4]] > 0).any()  # it did route there before
    assert not np.allclose(np.asarray(tr["hook_logits"]), np.asarray(before["hook_logits"]))
    assert edits.spec_key({"set": [], "heads_off": []}) == edits.spec_key(None)  # older specs keep their keys
    assert not edits.is_empty(spec)
    with pytest.raises(ValueError, match="^there is no expert 5 in layer 1 of this model$"):
        edits.from_spec({"experts_off": [[1, 5]]}, 2, 2, model.config)
    with pytest.raises(ValueError, match="^there is no expert 0 in layer 0 of this model$"):
        edits.from_spec({"experts_off": [[0, 0]]}, 2, 2, GPT(ModelConfig(n_layer=2)).config)


def test_the_load_balancing_loss_is_switch_transformers_and_training_adds_it():
    model = small_moe(router_aux_coef=0.05)
    idx, _ = rows_with_padding()
    g = torch.Generator().manual_seed(1)
    probs = torch.rand(3, 7, 5, generator=g).softmax(-1)
    chosen = probs.topk(2, dim=-1).indices
    f = torch.tensor([(chosen == e).float().sum().item() for e in range(5)]) / chosen.numel()
    assert torch.allclose(load_balance_loss(probs, chosen, 5), 5 * (f * probs.mean(dim=(0, 1))).sum())
    even = torch.full((1, 4, 4), 0.25)
    assert torch.allclose(load_balance_loss(even, torch.tensor([[[0], [1], [2], [3]]]), 4), torch.tensor(1.0))
    model.eval()
    plain = model(idx, idx)[1]
    model.train()
    trained = model(idx, idx)[1]  # dropout is 0: the only difference is the routers' loss
    aux = torch.stack([b.mlp.aux_loss for b in model.transformer.h]).mean()
    assert torch.allclose(trained, plain + 0.05 * aux, atol=1e-6) and aux > 0.9


def test_the_load_counts_choices_and_top_routed_lists_the_strongest():
    model = small_moe()
    idx, mask = rows_with_padding()
    tr = trace(model, idx, attention_mask=mask)
    w = np.asarray(tr[act_name("expert_weights", 0)])
    real = mask.numpy().astype(bool)
    by_hand = np.array([(w[real][:, e] > 0).sum() for e in range(5)]) / (real.sum() * 2)
    assert np.allclose(load_from_weights(w, real), by_hand) and np.isclose(by_hand.sum(), 1.0)
    loads = expert_load(model, idx, batch_size=2)  # in two batches, every position (no padding mask)
    w_all = np.asarray(trace(model, idx)[act_name("expert_weights", 0)])
    every = np.array([(w_all.reshape(-1, 5)[:, e] > 0).sum() for e in range(5)]) / (w.shape[0] * w.shape[1] * 2)
    assert np.allclose(loads[0], every)
    toks = [f"t{i}" for i in range(20)]
    top = top_routed(w[1], toks, 3, k=4)
    ws = w[1][:, 3]
    assert [p for p, _, _ in top] == [int(i) for i in np.argsort(-ws, kind="stable") if ws[i] > 0][:4]
    assert all(t == f"t{p}" and np.isclose(v, ws[p]) for p, t, v in top)


def test_a_mixture_checkpoint_saves_and_loads(tmp_path):
    model = small_moe(d_shared_expert=12, gated_mlp=True, activation="silu", moe_layers=[1], expert_bias=True)
    save_checkpoint(tmp_path / "moe.safetensors", model, None, task="t")
    loaded = load_checkpoint(tmp_path / "moe.safetensors").model
    idx, _ = rows_with_padding()
    assert loaded.config == model.config
    assert torch.equal(loaded(idx)[0], model(idx)[0])


@pytest.mark.parametrize("kw, message", [
    (dict(n_expert_active=6), "n_expert_active=6 must be from 1 to n_expert=5: the experts each token goes to"),
    (dict(n_expert=0, d_shared_expert=8), "d_shared_expert=8 needs experts: set n_expert (0 means a plain MLP in "
                                          "every layer)"),
    (dict(moe_layers=[2]), "moe_layers=(2,) must be layers of this model (0 to 1)"),
    (dict(moe_layers=[1, 0]), "moe_layers=(1, 0) must be sorted, each layer once"),
    (dict(attn_only=True), "n_expert=5 needs a decoder-only model whose blocks have an MLP (attn_only=False, "
                           "n_enc_layer=-1)"),
    (dict(n_expert=-1), "n_expert=-1 must be a whole number of at least 0"),
])
def test_a_bad_mixture_is_refused_naming_the_field(kw, message):
    base = dict(vocab_size=40, n_layer=2, n_head=2, n_embd=16, n_expert=5, d_expert=8)
    with pytest.raises(ValueError) as err:
        ModelConfig(**{**base, **kw})
    assert str(err.value) == message


def test_gpt_oss_s_gated_unit_is_its_formula_past_both_clamps():
    """(clamp(u, -L, L) + 1) · g'·σ(α g'), g' = min(g, L), written out here, on values past the clamp on both sides,
    with a limit and a slope that are not GPT-OSS's defaults."""
    from gptviz.model.experts import gated_unit

    cfg = ModelConfig(n_expert=2, n_expert_active=1, activation="gpt_oss_glu", swiglu_limit=1.5, swiglu_alpha=0.7)
    g = torch.tensor([-3.0, -0.5, 0.4, 1.2, 2.0, 9.0])
    u = torch.tensor([-4.0, -1.0, 0.3, 1.6, -2.5, 0.9])
    gc = torch.tensor([min(v, 1.5) for v in g.tolist()])
    uc = torch.tensor([max(-1.5, min(v, 1.5)) for v in u.tolist()])
    want = (uc + 1) * gc / (1 + torch.exp(-0.7 * gc))
    assert torch.allclose(gated_unit(g, u, cfg), want, atol=1e-6)
    assert torch.allclose(gated_unit(g, u, ModelConfig(gated_mlp=True, activation="silu")), F.silu(g) * u)
    dense = GPT(ModelConfig(vocab_size=40, n_layer=1, n_head=2, n_embd=16, gated_mlp=True, activation="gpt_oss_glu",
                            swiglu_limit=1.5, swiglu_alpha=0.7))  # a dense gated MLP with GPT-OSS's unit
    tr = trace(dense, torch.randint(0, 40, (1, 6)))
    g, u = (torch.as_tensor(np.asarray(tr[act_name(s, 0)])) * 30 for s in ("pre", "pre_linear"))
    gc, uc = g.clamp(max=1.5), u.clamp(-1.5, 1.5)
    assert torch.allclose(gated_unit(g, u, dense.config), (uc + 1) * gc * torch.sigmoid(0.7 * gc), atol=1e-6)
    h = torch.as_tensor(np.asarray(tr[act_name("post", 0)]))
    g0, u0 = (torch.as_tensor(np.asarray(tr[act_name(s, 0)])) for s in ("pre", "pre_linear"))
    assert torch.allclose(h, (u0.clamp(-1.5, 1.5) + 1) * g0.clamp(max=1.5) * torch.sigmoid(0.7 * g0.clamp(max=1.5)),
                          atol=1e-6)


def test_the_balancing_loss_counts_an_expert_no_token_chose():
    probs = torch.tensor([[[0.5, 0.3, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1]]])
    chosen = torch.tensor([[[0], [1]]])  # experts 2 and 3 never chosen
    f = torch.tensor([0.5, 0.5, 0.0, 0.0])
    assert torch.allclose(load_balance_loss(probs, chosen, 4), 4 * (f * probs.mean(dim=(0, 1))).sum())


@pytest.mark.parametrize("kw", [
    dict(n_expert=0), dict(n_expert=1, n_expert_active=1), dict(router_bias=True), dict(expert_bias=True),
    dict(gated_mlp=True, activation="silu", expert_bias=True, router_bias=True),
    dict(activation="gpt_oss_glu", expert_bias=True), dict(d_shared_expert=12),  # a shared expert on a GELU model
    dict(d_shared_expert=12, gated_mlp=True, activation="silu", moe_layers=[0], n_layer=3),
], ids=["dense", "one expert", "router bias", "expert biases", "gated, biases", "gpt-oss unit", "shared, gelu",
        "shared, one layer"])
def test_the_parameter_count_from_the_config_is_the_models(kw):
    model = small_moe(**kw)
    assert model.config.num_params() == sum(p.numel() for p in model.parameters())
    assert sum(hasattr(b.mlp, "router") for b in model.transformer.h) == \
        (0 if not kw.get("n_expert", 5) else len(kw.get("moe_layers") or range(model.config.n_layer)))


@pytest.mark.parametrize("kw", [dict(), dict(d_shared_expert=12, gated_mlp=True, activation="silu")])
def test_the_trace_estimate_counts_a_mixture_s_steps_exactly(kw):
    """moe_trace_floats is the number of floats one mixture layer's steps hold in a real trace of B=2, T=7."""
    from gptviz.config_moe import moe_trace_floats
    from gptviz.model.hook_names import EXPERT_STEPS

    model = small_moe(**kw)
    tr = trace(model, torch.randint(0, 40, (2, 7)))
    held = sum(np.asarray(tr[act_name(s, 1)]).size for s in EXPERT_STEPS if act_name(s, 1) in tr)
    assert moe_trace_floats(model.config, 2, 7) == held


@pytest.mark.parametrize("kw, message", [
    (dict(d_expert=0), "d_expert=0 must be a whole number of at least 1, or None (as wide as d_mlp)"),
    (dict(d_expert=2.0), "d_expert=2.0 must be a whole number of at least 1, or None (as wide as d_mlp)"),
    (dict(n_expert=2.0), "n_expert=2.0 must be a whole number of at least 0"),
    (dict(expert_renorm="yes"), "expert_renorm='yes' must be True or False"),
    (dict(router_aux_coef=-0.5), "router_aux_coef=-0.5 must be a finite number of at least 0"),
    (dict(router_aux_coef=float("nan")), "router_aux_coef=nan must be a finite number of at least 0"),
    (dict(swiglu_alpha=True), "swiglu_alpha=True must be a finite number of at least 0"),
    (dict(swiglu_limit=0), "swiglu_limit=0.0 must be above 0"),
    (dict(n_expert=0, activation="gpt_oss_glu"), "activation='gpt_oss_glu' is a gated unit: it needs gated_mlp=True "
                                                 "or experts (n_expert > 0)"),
    (dict(n_enc_layer=0), "n_expert=5 needs a decoder-only model whose blocks have an MLP (attn_only=False, "
                          "n_enc_layer=-1)"),
    (dict(n_expert_active=0), "n_expert_active=0 must be from 1 to n_expert=5: the experts each token goes to"),
    (dict(moe_layers="1"), "moe_layers='1' must be a list of layer indices, or None (every layer)"),
    (dict(moe_layers=[0.5]), "moe_layers=[0.5] must be a list of layer indices, or None (every layer)"),
    (dict(moe_layers=[0, 0]), "moe_layers=(0, 0) must be sorted, each layer once"),
    (dict(n_expert=0, moe_layers=[0]), "moe_layers=[0] needs experts: set n_expert (0 means a plain MLP in every "
                                       "layer)"),
])
def test_more_bad_mixtures_are_refused_word_for_word(kw, message):
    base = dict(vocab_size=40, n_layer=2, n_head=2, n_embd=16, n_expert=5, d_expert=8)
    with pytest.raises(ValueError) as err:
        ModelConfig(**{**base, **kw})
    assert str(err.value) == message


@pytest.mark.parametrize("kw", [dict(d_expert=1), dict(router_aux_coef=0), dict(swiglu_limit=0.5),
                                dict(n_expert_active=1), dict(n_expert_active=5), dict(moe_layers=[1]),
                                dict(n_expert=0, gated_mlp=True, activation="gpt_oss_glu"), dict(n_expert=1,
                                                                                                 n_expert_active=1)],
                         ids=["d_expert 1", "no aux loss", "limit 0.5", "top 1", "top all", "layer 1 only",
                              "gpt-oss unit in a dense gated MLP", "one expert"])
def test_mixtures_at_the_edges_of_the_rules_are_accepted(kw):
    cfg = ModelConfig(**{**dict(vocab_size=40, n_layer=2, n_head=2, n_embd=16, n_expert=5, d_expert=8), **kw})
    assert [cfg.is_moe_layer(i) for i in range(2)] == ([False, False] if not cfg.n_expert else
                                                      [i in (cfg.moe_layers or (0, 1)) for i in range(2)])


# --------------------------------------------------------------------------- the Experts page's readers, by hand
def test_the_moe_layers_are_the_configs_and_a_dense_model_has_none():
    """Only the layers ``moe_layers`` names have experts (a config with experts elsewhere has plain MLPs)."""
    base = dict(vocab_size=40, n_layer=3, n_head=2, n_embd=16)
    assert moe_layers(ModelConfig(**base, n_expert=5, d_expert=8, moe_layers=[1])) == [1]
    assert moe_layers(ModelConfig(**base, n_expert=5, d_expert=8, moe_layers=[0, 2])) == [0, 2]
    assert moe_layers(ModelConfig(**base, n_expert=5, d_expert=8)) == [0, 1, 2]
    assert moe_layers(ModelConfig(**base)) == []


def test_the_load_counts_one_choice_and_reads_a_0_1_mask_and_an_unmasked_batch():
    """A single choice is the whole load; the page's padding mask may come as the batch's 0/1 attention mask; with
    no mask every position counts, whatever the batch's shape (here T = 3 ≠ E = 4), counted here by hand."""
    one = np.zeros((1, 1, 4))
    one[0, 0, 2] = 0.8
    assert load_from_weights(one).tolist() == [0.0, 0.0, 1.0, 0.0]
    g = np.random.default_rng(5)
    w = np.zeros((2, 3, 4))
    for b in range(2):
        for t in range(3):
            w[b, t, g.choice(4, size=2, replace=False)] = g.random(2) + 0.1
    counts = np.zeros(4)
    for b in range(2):
        for t in range(3):
            counts += w[b, t] > 0
    assert np.allclose(load_from_weights(w), counts / 12)
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])  # as ``attention_mask``: ints, 0 on padding
    kept = np.zeros(4)
    for b, t in [(0, 1), (0, 2), (1, 0), (1, 1)]:
        kept += w[b, t] > 0
    assert np.allclose(load_from_weights(w, mask), kept / 8)
    assert np.allclose(load_from_weights(w, mask.numpy()), kept / 8)


def test_top_routed_keeps_ten_by_default_only_chosen_positions_and_earlier_positions_first_on_ties():
    """A top-1 router renormalised gives every chosen token the weight 1.0: the ties are listed by position."""
    g = np.random.default_rng(1)
    T, E = 40, 4
    w = np.zeros((T, E))
    w[np.arange(T), g.integers(0, E, T)] = 1.0
    toks = [f"t{i}" for i in range(T)]
    for e in range(E):
        chosen_at = [t for t in range(T) if w[t, e] > 0]
        want = [(t, f"t{t}", 1.0) for t in chosen_at[:10]]
        assert top_routed(w, toks, e) == want, e
        assert top_routed(w, toks, e, k=T) == [(t, f"t{t}", 1.0) for t in chosen_at], e
    few = np.zeros((T, E))
    few[[3, 7, 30], 1] = [0.2, 0.9, 0.2]
    assert top_routed(few, toks, 1) == [(7, "t7", 0.9), (3, "t3", 0.2), (30, "t30", 0.2)]


def test_top_routed_windows_lists_the_strongest_tokens_of_every_window_by_hand():
    """(window, position, weight), strongest first, ties in reading order, only the tokens that chose the expert."""
    g = np.random.default_rng(2)
    N, T, E = 5, 12, 4
    w = np.zeros((N, T, E))
    for n in range(N):
        for t in range(T):
            w[n, t, g.choice(E, size=2, replace=False)] = g.choice([0.25, 0.5, 0.75])  # many ties
    windows = g.integers(0, 40, (N, T))
    for e in range(E):
        hits = sorted(((-w[n, t, e], n, t) for n in range(N) for t in range(T) if w[n, t, e] > 0))
        want = [(n, t, -v) for v, n, t in hits]
        assert top_routed_windows(w, windows, e) == want[:10], e
        assert top_routed_windows(w, windows, e, k=4) == want[:4], e
        assert top_routed_windows(w, windows, e, k=N * T) == want, e
        assert all(isinstance(n, int) and isinstance(t, int) and isinstance(v, float)
                   for n, t, v in top_routed_windows(w, windows, e))
    few = np.zeros((2, 3, 2))
    few[1, 2, 0] = 0.3
    assert top_routed_windows(few, np.zeros((2, 3), dtype=int), 0) == [(1, 2, 0.3)]
    assert top_routed_windows(few, np.zeros((2, 3), dtype=int), 1) == []


class _CharIds:
    """A stand-in tokenizer: one id per character."""

    def encode(self, text):
        return [ord(c) % 97 for c in text]


def test_the_held_out_windows_are_64_evenly_spread_blocks_of_the_held_out_plays():
    from gptviz.text import corpus

    ids = np.array([ord(c) % 97 for c in corpus.load("val")])
    for bs, max_windows in [(64, None), (len(ids) // 10, 64), (256, 7)]:
        n = len(ids) // bs
        got = (held_out_windows(_CharIds(), bs) if max_windows is None else
               held_out_windows(_CharIds(), bs, max_windows)).numpy()
        want_n = min(n, 64 if max_windows is None else max_windows)
        assert got.shape == (want_n, bs)
        blocks = ids[:n * bs].reshape(n, bs)
        at, j = [], 0
        for row in got:  # each window is a block of the text, in order
            while not np.array_equal(blocks[j], row):
                j += 1
            at.append(j)
            j += 1
        assert at[0] == 0 and at[-1] == n - 1
        gaps = np.diff(at)
        assert gaps.min() >= 1 and gaps.max() - gaps.min() <= 1, gaps  # evenly spread


def test_expert_0_of_layer_0_can_be_switched_off_and_only_a_moe_layer_s_expert_with_the_config():
    """The edges of the rule: layer 0 and expert 0 exist; the layer after the last, a dense layer of a model with
    experts on some layers, and any expert without the model's config (no config: no expert) are refused by name."""
    model = small_moe(moe_layers=[0])
    idx, mask = rows_with_padding()
    spec = {"experts_off": [[0, 0]]}
    tr = trace(model, idx, attention_mask=mask, edits=edits.from_spec(spec, 2, 2, model.config))
    x = torch.as_tensor(np.asarray(tr[act_name("out", 0, "ln2")]))
    *_, y = oracle_moe(model.transformer.h[0].mlp, x, off=(0,))
    assert torch.allclose(torch.as_tensor(np.asarray(tr[act_name("mlp_out", 0)])), y, atol=1e-5)
    assert (np.asarray(tr[act_name("expert_weights", 0)])[..., 0] == 0).all()
    other = small_moe(moe_layers=[1])
    tr = trace(other, idx, attention_mask=mask, edits=edits.from_spec({"experts_off": [[1, 0]]}, 2, 2, other.config))
    assert (np.asarray(tr[act_name("expert_weights", 1)])[..., 0] == 0).all()
    every = small_moe().config  # experts on both layers: layer 2 is past the last
    for layer, expert, cfg in [(2, 0, every), (1, 0, model.config), (0, 0, other.config), (0, 5, model.config),
                               (0, 0, None)]:
        with pytest.raises(ValueError) as err:
            edits.from_spec({"experts_off": [[layer, expert]]}, 2, 2, cfg)
        assert str(err.value) == f"there is no expert {expert} in layer {layer} of this model"
    with pytest.raises(ValueError) as err:
        edits.from_spec({"experts_off": [[0, 0]]}, 2, 2)
    assert str(err.value) == "there is no expert 0 in layer 0 of this model"
