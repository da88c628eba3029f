"""Parity with an independent implementation: Hugging Face's GPT-2, built locally with random weights."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

from gptviz import from_hf_gpt2, trace


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
