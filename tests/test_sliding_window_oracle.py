"""Sliding-window attention (issue 38): the window is a mask, never a cap on the context.

Each check is against a computation that does not go through the code under test: the mask against a double loop
written from the rule (query i may see key j iff j <= i and j > i - window, transformers' ``sliding_window_overlay``,
and not a padded key); a windowed layer's pattern against plain PyTorch from the weights; Mistral and Qwen2 folders
built here with random weights against ``transformers``' own models on the same folder (eager attention,
``output_attentions=True``); which layers get the window against ``transformers``' own config classes."""
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hf_models import build, compare, long_ids
from lazy_import import lazy

import gptviz
from gptviz import GPT, CharBPETokenizer, ModelConfig, build_model, preset, trace
from gptviz.model.checkpoint import load_checkpoint, save_checkpoint
from gptviz.model.hook_names import act_name
from gptviz.model.pretrained import model_config

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip

T = 12


def loop_allowed(T: int, window, pad=None) -> np.ndarray:
    """(rows, T, T) bool, cell by cell from the rule: key j is allowed for query i iff j <= i, j > i - window (no
    window: no such bound) and key j is not padding (``pad``: a 0/1 list per batch row; None: one row, no padding)."""
    rows = pad if pad is not None else [[1] * T]
    out = np.zeros((len(rows), T, T), dtype=bool)
    for b, r in enumerate(rows):
        for i in range(T):
            for j in range(T):
                out[b, i, j] = j <= i and (window is None or j > i - window) and r[j] == 1
    return out


def left_padded(B: int = 2, pad: int = 4) -> torch.Tensor:
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :pad] = 0
    return mask


def ids(vocab: int, B: int = 2, n: int = T, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (B, n), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- the mask, against a double loop
@pytest.mark.parametrize("window", [1, 3, T, T + 5])
@pytest.mark.parametrize("layers", [None, (1,)], ids=["every-layer", "layer-1-only"])
@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "left-padding"])
def test_the_masked_cells_of_every_layer_are_the_double_loops(window, layers, padded):
    """Every layer's masked scores (−∞ exactly where the loop says no, in every head and batch row, batch row 1
    left-padded), its pattern 0 there, and a layer outside ``sliding_layers`` keeping the plain causal mask."""
    cfg = ModelConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=16, sliding_window=window,
                      sliding_layers=layers)
    model = GPT(cfg)
    mask = left_padded() if padded else None
    tr = trace(model, ids(32), attention_mask=mask)
    pad = mask.tolist() if padded else None
    for layer in range(2):
        w = window if layers is None or layer in layers else None
        want = np.broadcast_to(loop_allowed(T, w, pad), (2, T, T))
        scores = tr[act_name("attn_scores", layer)].numpy()
        pattern = tr[act_name("pattern", layer)].numpy()
        for b in range(2):
            for h in range(2):
                np.testing.assert_array_equal(np.isneginf(scores[b, h]), ~want[b], err_msg=f"layer {layer} row {b}")
                assert (pattern[b, h][~want[b]] == 0).all()
                live = want[b].any(-1)  # a dead row (a padded query with no key) is all zeros, as before
                np.testing.assert_allclose(pattern[b, h][live].sum(-1), 1.0, atol=1e-6)
                assert (pattern[b, h][~live] == 0).all()


@pytest.mark.parametrize("window", [None, 1, 3, T, 10**30])
def test_allowed_keys_and_its_dead_rows_are_the_double_loops(window):
    """``allowed_keys`` itself: the cells, and the dead rows (a query that may see no key: padding, or right padding
    longer than the window) against the loop; a window of any size is accepted (10**30: causal)."""
    model = GPT(ModelConfig(vocab_size=8, block_size=16, n_layer=1, n_head=1, n_embd=4))
    for pad in ([[1] * T], [[0] * 4 + [1] * 8, [1] * 5 + [0] * 7]):
        am = torch.tensor(pad)
        allowed, dead = model.allowed_keys(T, am, window)
        w = None if window is None or window >= T else window
        want = loop_allowed(T, w, pad)
        np.testing.assert_array_equal(allowed[:, 0].numpy(), want)
        want_dead = ~want.any(-1)
        if want_dead.any():
            np.testing.assert_array_equal(dead[:, 0, :, 0].numpy(), want_dead)
        else:
            assert dead is None
    allowed, dead = model.allowed_keys(T, None, window)
    np.testing.assert_array_equal(allowed[0, 0].numpy(), loop_allowed(T, window if window != 10**30 else None)[0])
    assert dead is None


def test_a_windowed_pattern_against_plain_pytorch():
    """A one-layer model with a window of 3: its pattern and logits from the weights, written out here."""
    cfg = ModelConfig(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=16, sliding_window=3,
                      attn_only=True)
    model = GPT(cfg)
    idx = ids(32, B=1)
    tr = trace(model, idx)
    w = model.transformer
    x = w.wte.weight[idx] + w.wpe.weight[:T]
    blk = w.h[0]
    h = F.layer_norm(x, (16,), blk.ln_1.weight, blk.ln_1.bias, cfg.ln_eps)
    q, k, v = blk.attn.c_attn(h).split(16, dim=2)
    q, k, v = (t.view(1, T, 2, 8).transpose(1, 2) for t in (q, k, v))
    band = torch.tensor([[i - 3 < j <= i for j in range(T)] for i in range(T)])
    att = F.softmax((q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~band, float("-inf")), dim=-1)
    torch.testing.assert_close(tr[act_name("pattern", 0)], att.detach(), atol=1e-6, rtol=1e-5)
    z = (att @ v).transpose(1, 2).reshape(1, T, 16)
    y = x + blk.attn.c_proj(z)
    logits = model.lm_head(F.layer_norm(y, (16,), w.ln_f.weight, w.ln_f.bias, cfg.ln_eps))
    torch.testing.assert_close(tr["hook_logits"], logits.detach(), atol=1e-5, rtol=1e-5)


def test_an_encoder_decoder_windows_its_decoder_self_attention_only():
    """The decoder's self-attention gets the band; cross-attention (decoder positions × source) is unaffected."""
    model = build_model(preset("decoder-cross-attention", sliding_window=2))
    idx = ids(12, B=1, n=8)
    tr = trace(model, idx)
    np.testing.assert_array_equal(np.isneginf(tr[act_name("attn_scores", 0)][0, 0].numpy()),
                                  ~loop_allowed(8, 2)[0])
    assert not torch.isneginf(tr[act_name("attn_scores", 0, "cross_attn")]).any()


# --------------------------------------------------------------------------- the config and the checkpoint
@pytest.mark.parametrize("kwargs, fragment", [
    (dict(sliding_window=0), "sliding_window=0 must be a whole number of at least 1"),
    (dict(sliding_window=-1), "sliding_window=-1 must be"),
    (dict(sliding_window=True), "sliding_window=True must be"),
    (dict(sliding_window=2.0), "sliding_window=2.0 must be"),
    (dict(sliding_window="3"), "sliding_window='3' must be"),
    (dict(sliding_window=3, sliding_layers=(2,)), "must be layers of this model (0 to 1)"),
    (dict(sliding_window=3, sliding_layers=(-1,)), "must be layers of this model"),
    (dict(sliding_window=3, sliding_layers=(1, 0)), "must be sorted, each layer once"),
    (dict(sliding_window=3, sliding_layers=(0, 0)), "must be sorted, each layer once"),
    (dict(sliding_window=3, sliding_layers=(True,)), "must be a list of layer indices"),
    (dict(sliding_window=3, sliding_layers=1), "must be a list of layer indices"),
    (dict(sliding_layers=(0,)), "needs a sliding_window"),
])
def test_a_wrong_window_is_refused_naming_the_field(kwargs, fragment):
    with pytest.raises(ValueError) as err:
        ModelConfig(n_layer=2, **kwargs)
    assert fragment in str(err.value)


def test_the_window_goes_through_json_as_a_list_and_back():
    cfg = ModelConfig(n_layer=3, sliding_window=4, sliding_layers=[0, 2])  # a list, as JSON gives it
    assert cfg.sliding_layers == (0, 2) and hash(cfg) == hash(ModelConfig(n_layer=3, sliding_window=4,
                                                                         sliding_layers=(0, 2)))
    data = json.loads(cfg.to_json())
    assert data["sliding_window"] == 4 and data["sliding_layers"] == [0, 2]
    assert ModelConfig.from_dict(data) == cfg
    assert [cfg.layer_window(i) for i in range(3)] == [4, None, 4]
    assert ModelConfig.from_dict(json.loads(ModelConfig().to_json())).sliding_window is None


def test_a_checkpoint_keeps_the_window(tmp_path):
    cfg = ModelConfig(vocab_size=16, block_size=16, n_layer=2, n_head=2, n_embd=8, sliding_window=2,
                      sliding_layers=(1,), seed=3)
    model = GPT(cfg)
    path = tmp_path / "w.safetensors"
    save_checkpoint(path, model, CharBPETokenizer(0).train(["abcabc"]))
    ck = load_checkpoint(path)
    assert ck.config == cfg and (ck.config.sliding_window, ck.config.sliding_layers) == (2, (1,))
    idx = ids(16)
    assert torch.equal(trace(ck.model, idx)["hook_logits"], trace(model, idx)["hook_logits"])
    assert torch.isneginf(trace(ck.model, idx)[act_name("attn_scores", 1)][0, 0, 5, 3])  # 2 back: outside


# --------------------------------------------------------------------------- transformers' Mistral and Qwen2


def test_a_window_8_mistral_reads_a_48_token_text_as_transformers_does(tmp_path):
    """The issue's folder: sliding_window 8, max_position_embeddings 64. It used to be built for 8 positions and
    refuse a 40-token text ("sequence length 40 is longer than block_size=8"); now it opens for 64, masks a band of
    8 on every layer, and its logits and patterns are transformers' (one row, and two rows with left padding)."""
    pytest.importorskip("tokenizers")
    hf = build("mistral", tmp_path, sliding_window=8)
    assert hf.config.sliding_window == 8
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.block_size, c.sliding_window, c.sliding_layers) == (64, 8, None)
    idx = torch.tensor([long_ids(tok)])
    logits, _ = model(idx[:, :40])  # the refusal is gone
    assert logits.shape == (1, 40, c.vocab_size)
    with torch.no_grad():  # the oracle does window: a query 20 back gets nothing, 7 back something
        att = hf(idx, output_attentions=True).attentions[0][0]
    assert (att[:, 30, :23] == 0).all() and (att[:, 30, 23:31] > 0).all()
    compare(hf, model, idx)
    two = torch.tensor([long_ids(tok), long_ids(tok)[::-1]])
    mask = torch.ones_like(two)
    mask[1, :5] = 0
    compare(hf, model, two, mask)


@pytest.mark.parametrize("extra, layers", [
    ({"max_window_layers": 1}, (1,)),  # Qwen2Config: layers i >= max_window_layers slide
    ({"max_window_layers": 1, "layer_types": ["sliding_attention", "full_attention"]}, (0,)),  # layer_types wins
    ({"max_window_layers": 0}, None),  # every layer
])
def test_a_qwen2_with_a_window_on_some_layers_matches_transformers(tmp_path, extra, layers):
    """use_sliding_window with a window of 8 on the layers transformers' Qwen2Config puts it on: each layer's eager
    pattern (the full layer's reaching back further than 8, the windowed one's not), and with left padding."""
    pytest.importorskip("tokenizers")
    hf = build("qwen2", tmp_path, use_sliding_window=True, sliding_window=8, **extra)
    sliding = [i for i, t in enumerate(hf.config.layer_types) if t == "sliding_attention"]
    assert tuple(sliding) == (layers or (0, 1))
    model, tok = gptviz.from_pretrained(tmp_path)
    assert (model.config.sliding_window, model.config.sliding_layers) == (8, layers)
    idx = torch.tensor([long_ids(tok)])
    with torch.no_grad():
        att = hf(idx, output_attentions=True).attentions
    for layer in range(2):
        assert bool((att[layer][0, :, 30, :23] == 0).all()) == (layer in sliding)
    compare(hf, model, idx)
    two = torch.tensor([long_ids(tok), long_ids(tok)[::-1]])
    mask = torch.ones_like(two)
    mask[1, :5] = 0
    compare(hf, model, two, mask)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_stray_sliding_window_is_ignored_as_transformers_ignores_it(tmp_path, family):
    """GPT-2's and Llama's modelling code has no sliding window: a config.json carrying one runs causal attention
    in transformers, and here, over the whole context (before, it capped the context at 4)."""
    pytest.importorskip("tokenizers")
    hf = build(family, tmp_path, sliding_window=4)
    model, tok = gptviz.from_pretrained(tmp_path)
    assert (model.config.block_size, model.config.sliding_window) == (64, None)
    compare(hf, model, torch.tensor([long_ids(tok, 40)]))


@pytest.mark.parametrize("model_type, d", [
    ("mistral", {"sliding_window": 5}),
    ("mistral", {"sliding_window": None}),
    ("mistral", {}),
    ("mistral", {"sliding_window": 5, "use_sliding_window": False, "layer_types": ["full_attention"] * 3}),
    ("qwen2", {"sliding_window": 5}),
    ("qwen2", {"sliding_window": 5, "use_sliding_window": True}),
    ("qwen2", {"sliding_window": 5, "use_sliding_window": True, "max_window_layers": 2}),
    ("qwen2", {"sliding_window": 5, "use_sliding_window": True, "max_window_layers": 0}),
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 1}),
    ("qwen2", {"sliding_window": None, "use_sliding_window": True, "max_window_layers": 1}),
    ("qwen2", {"sliding_window": 5, "use_sliding_window": True,
               "layer_types": ["full_attention", "sliding_attention", "full_attention"]}),
])
def test_which_layers_slide_is_what_transformers_config_classes_say(tmp_path, model_type, d):
    """The oracle: transformers' MistralConfig (its ``sliding_window``, one mask for every layer in MistralModel) and
    Qwen2Config (``sliding_window`` and ``layer_types``, as Qwen2Model picks each layer's mask)."""
    base = {"vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 3,
            "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **base, **d}))
    cfg, _ = model_config(tmp_path)
    t = transformers.AutoConfig.for_model(model_type, **base, **d)
    if model_type == "mistral":
        want = [t.sliding_window] * 3
    else:
        want = [t.sliding_window if kind == "sliding_attention" else None for kind in t.layer_types]
    assert [cfg.layer_window(i) for i in range(3)] == want
    assert cfg.block_size == 32


@pytest.mark.parametrize("d, message", [
    ({"layer_types": ["sliding_attention"] * 2}, "layer_types=['sliding_attention', 'sliding_attention'] must be a "
                                                 "list of 3 (num_hidden_layers) layer types"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention"]}, "each 'full_attention' or"),
    ({"use_sliding_window": False, "layer_types": ["sliding_attention"] * 3}, "has sliding_attention layers but no "
                                                                               "sliding window"),
    ({"sliding_window": 0}, "config.json's sliding_window=0 must be at least 1"),
    ({"max_window_layers": -1}, "config.json's max_window_layers=-1 must be at least 0"),
])
def test_a_qwen2_window_config_that_cannot_run_is_refused(tmp_path, d, message):
    base = {"model_type": "qwen2", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8,
            "num_hidden_layers": 3, "num_attention_heads": 2, "max_position_embeddings": 32,
            "use_sliding_window": True}
    (tmp_path / "config.json").write_text(json.dumps({**base, **d}))
    with pytest.raises(ValueError) as err:
        model_config(tmp_path)
    assert message in str(err.value)


# --------------------------------------------------------------------------- what the pages say
def test_the_masked_scores_step_says_which_keys_the_window_masks():
    from gptviz.present.descriptions import describe
    from gptviz.present.figures import architecture_parts

    cfg = ModelConfig(n_layer=2, sliding_window=4, sliding_layers=(1,))
    windowed = describe(act_name("attn_scores", 1), cfg)
    assert "sliding window of 4 positions" in windowed.explanation
    assert "keys more than 3 positions back" in windowed.explanation and "i - 4 < j" in windowed.formula
    plain = describe(act_name("attn_scores", 0), cfg)
    assert "window" not in plain.explanation and plain.title == "L0 masked scores"
    lines = [line for part in architecture_parts(cfg, 1, 8) for line in part["lines"]]
    assert "sliding window: each query sees its last 4 positions (layer 1)" in lines
    assert not any("window" in line for part in architecture_parts(ModelConfig(), 1, 8) for line in part["lines"])
