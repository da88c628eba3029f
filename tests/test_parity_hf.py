"""Parity with an independent implementation: Hugging Face's GPT-2, built locally with random weights; and a Gemma
model folder opened by ``gptviz.from_pretrained`` against transformers' ``GemmaForCausalLM`` on the same folder."""
import json

import pytest
import torch
from lazy_import import lazy

transformers = lazy("transformers", skip=True)

import gptviz
from gptviz import from_hf_gpt2, trace
from gptviz.model.hook_names import act_name


def make_hf(tie=True, activation="gelu_new", seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=24, n_layer=3, n_head=4,
                                  activation_function=activation, tie_word_embeddings=tie,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  attn_implementation="eager")  # eager: the only one that returns patterns
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # move biases and norm weights away from their init (0 and 1)
        for name, p in hf.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return hf


@pytest.mark.parametrize("tie,activation", [(True, "gelu_new"), (False, "gelu"), (True, "relu")])
def test_logits_and_every_attention_pattern_match(tie, activation):
    hf = make_hf(tie, activation)
    ours = from_hf_gpt2(hf)
    idx = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = hf(idx, output_attentions=True)
    tr = trace(ours, idx)
    assert torch.allclose(tr["hook_logits"], out.logits, atol=1e-5)
    assert len(out.attentions) == 3
    for l, att in enumerate(out.attentions):
        assert torch.allclose(tr[f"blocks.{l}.attn.hook_pattern"], att, atol=1e-5)
    assert ours.config.tie_weights is tie


def test_loss_and_padding_match():
    hf = make_hf()
    ours = from_hf_gpt2(hf)
    idx = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 6:] = 0
    with torch.no_grad():
        out = hf(idx, attention_mask=mask, labels=idx)
    tr = trace(ours, idx, attention_mask=mask)
    assert torch.allclose(tr["hook_logits"][0], out.logits[0], atol=1e-5)
    assert torch.allclose(tr["hook_logits"][1, :6], out.logits[1, :6], atol=1e-5)
    shifted = idx.clone()
    shifted[:, :-1] = idx[:, 1:]
    shifted[:, -1] = -100
    tr2 = trace(ours, idx, targets=shifted)
    assert tr2.loss == pytest.approx(hf(idx, labels=idx).loss.item(), abs=1e-5)


def test_unsupported_hf_options_are_refused():
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=24, n_layer=1, n_head=4,
                                  scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        from_hf_gpt2(transformers.GPT2LMHeadModel(cfg))


@pytest.mark.parametrize("n_kv_head", [1, 2])  # multi-query (as Gemma 2b) and grouped-query attention
def test_a_gemma_folder_matches_transformers(n_kv_head, tmp_path):
    """Gemma 1: RMSNorm gains applied as 1 + w (random w: transformers starts them at 0, where 1 + w is 1), the
    embeddings times √hidden_size while the tied unembedding is the unscaled table, GeGLU, head_dim 32 (not
    64 / 4 heads). Logits, every layer's and head's attention pattern and the token ids equal transformers' and
    tokenizers'."""
    tokenizers = pytest.importorskip("tokenizers")
    from hf_models import TEXT, build

    hf = build("gemma", tmp_path, num_key_value_heads=n_kv_head)
    for name, w in hf.named_parameters():
        if name.endswith("norm.weight"):  # offsets around 0, none at the zero init
            assert 0.05 < w.abs().mean() < 0.5 and w.abs().min() > 0, name
    model, tok = gptviz.from_pretrained(tmp_path)
    c = model.config
    assert (c.n_head, c.n_kv_head, c.d_head, c.n_embd, c.activation, c.gated_mlp, c.norm, c.pos_encoding) == \
        (4, n_kv_head, 32, 64, "gelu_tanh", True, "rmsnorm", "rope")
    own = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ids = tok.encode(TEXT)
    assert ids == own.encode(TEXT).ids and len(ids) > 10
    idx = torch.tensor([ids[:40]])
    with torch.no_grad():
        out = hf(idx, output_attentions=True, output_hidden_states=True)
        table = hf.model.embed_tokens.weight
        assert torch.allclose(out.hidden_states[0], table[idx] * 8.0)  # √64: transformers scales the lookup
    tr = trace(model, idx)
    assert torch.equal(tr[act_name("embed")], out.hidden_states[0])  # the scaled rows, to the bit
    assert torch.equal(model.lm_head.weight, table)  # the unembedding: the stored table, unscaled
    assert (tr["hook_logits"] - out.logits).abs().max().item() < 1e-4
    assert len(out.attentions) == c.n_layer
    for layer, pattern in enumerate(out.attentions):  # (B, n_head, T, T) per layer
        assert torch.allclose(tr[act_name("pattern", layer)], pattern, atol=1e-5), layer
    assert tok.decode(ids) == own.decode(ids, skip_special_tokens=False)


GEMMA = {"model_type": "gemma", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
         "max_position_embeddings": 64, "hidden_act": "gelu", "rms_norm_eps": 1e-6}


@pytest.mark.parametrize("change, outcome", [
    ({}, "gelu_tanh"),  # Gemma's first configs say "gelu" for the tanh approximation, as transformers reads it
    ({"hidden_activation": "gelu_pytorch_tanh"}, "gelu_tanh"),  # Gemma 1.1's: both keys, agreeing
    ({"hidden_activation": "gelu", "hidden_act": "gelu_pytorch_tanh"}, "name different activations"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings=false is not supported"),
    ({"head_dim": None}, "lacks 'head_dim'"),
    ({"use_bidirectional_attention": True}, "causal attention"),
    ({"attn_logit_softcapping": 50.0}, "Gemma 2's"),
    ({"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
      "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256}, "over the limit"),  # Gemma 7b's shape
])
def test_a_gemma_config_is_read_or_refused_before_anything_is_built(tmp_path, change, outcome):
    from gptviz.model.pretrained import model_config

    d = {k: v for k, v in {**GEMMA, **change}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(d))
    if outcome == "gelu_tanh":
        cfg, family = model_config(tmp_path)
        assert (family, cfg.activation, cfg.d_head, cfg.n_kv_head, cfg.tie_weights) == ("gemma", "gelu_tanh", 32, 1,
                                                                                          False)
    else:
        with pytest.raises(ValueError, match=outcome):
            model_config(tmp_path)
