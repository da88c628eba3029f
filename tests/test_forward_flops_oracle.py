"""ModelConfig.forward_flops, worked out from the shape alone, against PyTorch's own count of a real forward pass
(torch.utils.flop_counter.FlopCounterMode: 2·m·n·k for every matrix product, bias additions left out), plus 2 per
token for each 1-D parameter (biases and norm gains, which the estimate counts as weights a token passes through).
Batch 2, so a per-row count that forgot the batch fails; a mixture of experts routes each token to exactly k experts,
so the count of the experts that really ran is exact too."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gptviz import GPT, ModelConfig
from gptviz.present import page_context
from gptviz.present.page_context import BIG_MODEL_T, big_model_t, why_cut

SHAPES = {
    "gpt2-like, learned positions, tied": ModelConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16),
    "llama-like, grouped-query, untied": ModelConfig(
        vocab_size=50, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, d_mlp=24, norm="rmsnorm",
        pos_encoding="rope", bias=False, tie_weights=False, activation="silu", gated_mlp=True),
    "qwen3-like, QK-norm, wide heads": ModelConfig(
        vocab_size=50, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, d_head=8, d_mlp=24,
        norm="rmsnorm", pos_encoding="rope", bias=False, activation="silu", gated_mlp=True, qk_norm=True),
    "experts on two of three layers, top 2 of 4": ModelConfig(
        vocab_size=50, block_size=16, n_layer=3, n_head=2, n_embd=16, n_expert=4, n_expert_active=2, d_expert=8,
        moe_layers=[0, 2], norm="rmsnorm", pos_encoding="rope", bias=False, activation="silu", gated_mlp=True),
    "experts with a shared expert, top 1 of 3, sinks": ModelConfig(
        vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16, n_expert=3, n_expert_active=1, d_expert=8,
        d_shared_expert=12, norm="rmsnorm", pos_encoding="rope", bias=False, activation="silu", gated_mlp=True,
        attn_sinks=True),
    "attention only, sinusoidal": ModelConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                              attn_only=True, pos_encoding="sinusoidal"),
}


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("T", [1, 7, 16])
def test_the_estimate_is_pytorchs_count_of_a_real_pass(name, T):
    cfg, B = SHAPES[name], 2
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (B, T))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(ids)
    one_d = sum(p.numel() for p in model.parameters() if p.ndim == 1)
    assert cfg.forward_flops(B, T) == counter.get_total_flops() + 2 * B * T * one_d


QWEN3_06B = ModelConfig(vocab_size=151936, block_size=40960, n_layer=28, n_head=16, n_kv_head=8, n_embd=1024,
                        d_head=128, d_mlp=3072, norm="rmsnorm", pos_encoding="rope", bias=False, tie_weights=True,
                        rope_base=1e6, activation="silu", gated_mlp=True, qk_norm=True)
GPT2_SMALL = ModelConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)


def test_a_qwen3_06b_shape_reads_128_tokens_and_the_page_says_why(monkeypatch):
    """Its pass over 256 tokens is about 320 GFLOP (2 per weight per token: 2 × 596M × 256 = 305, and 15 for the
    28 layers' 256 × 256 products), over the 160 GFLOP budget; 128 tokens cost 156. GPT-2 small keeps 512 (136)."""
    monkeypatch.delenv("GPTVIZ_PAGE_GFLOP", raising=False)
    assert QWEN3_06B.num_params() == 596_049_920
    assert 2 * 596_049_920 * 256 < QWEN3_06B.forward_flops(1, 256) < 2 * 596_049_920 * 256 + 16e9
    assert big_model_t(QWEN3_06B) == 128 and big_model_t(GPT2_SMALL) == BIG_MODEL_T == 512
    assert QWEN3_06B.trace_bytes(1, 256, slim=True) < page_context.MAX_TRACE_BYTES  # memory alone would allow 256
    said = why_cut(QWEN3_06B, 128)
    assert said.startswith("This model has 596M parameters: each line is cut to 128 tokens because one pass over "
                           "256 tokens would cost about 320 GFLOP, over this server's budget of 160 GFLOP a text")
    assert why_cut(GPT2_SMALL, 512) == ("This model has 124M parameters: each line is cut to 512 tokens to keep the "
                                        "pages responsive.")


@pytest.mark.parametrize("raw, expected", [("400", 256), ("10000", 256), ("20000", 128), ("5", 128), ("lots", 128),
                                           ("nan", 128), ("inf", 128), ("", 128)])
def test_a_server_may_raise_the_budget_within_bounds(monkeypatch, raw, expected):
    """10,000 GFLOP would allow 512 tokens, but their slim trace is over the memory limit: 256."""
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", raw)
    assert big_model_t(QWEN3_06B) == expected


def test_compare_models_counts_both_models_passes_and_the_second_trace(monkeypatch):
    """Compare models runs two models on the text and keeps both traces: three passes' work, so where the budget
    binds fewer tokens (Qwen3-0.6B: 3 × 77.2 GFLOP at 64 is over 160, so 32; GPT-2 small: 3 × 68 at
    256 is over 160, so 128); a model whose budget does not bind keeps its 512."""
    monkeypatch.delenv("GPTVIZ_PAGE_GFLOP", raising=False)
    assert page_context.COMPARE_PASSES == 3
    assert big_model_t(QWEN3_06B, 3) == 32 and big_model_t(GPT2_SMALL, 3) == 128
    assert QWEN3_06B.forward_flops(1, 64) * 3 > 160e9 >= QWEN3_06B.forward_flops(1, 32) * 3  # the oracle's own sums
    assert why_cut(QWEN3_06B, 32, 3, page_context.COMPARE_SAID).startswith(
        "This model has 596M parameters: each line is cut to 32 tokens because the work of about 3 passes over 64 "
        "tokens (one pass for each model, and one for keeping the second model's trace) would cost about 232 GFLOP, "
        "over this server's budget of 160 GFLOP a text")
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "10000")
    assert big_model_t(QWEN3_06B, 3) == 256  # a faster server's budget: the trace limit binds


def test_a_mixture_of_experts_over_the_parameter_limit_names_its_expert_fields():
    """Mixtral-8x7B's shape (46.7B parameters): refused before anything is built, naming the fields that make a
    mixture of experts big; a dense model's message names d_mlp instead."""
    mixtral = ModelConfig(vocab_size=32000, block_size=64, n_layer=32, n_head=32, n_kv_head=8, n_embd=4096,
                          d_mlp=14336, norm="rmsnorm", pos_encoding="rope", bias=False, tie_weights=False,
                          activation="silu", gated_mlp=True, n_expert=8, n_expert_active=2)
    assert mixtral.num_params() == 46_702_792_704
    with pytest.raises(ValueError, match=r"over the limit of 600,000,000: make n_layer, n_embd, n_expert, d_expert "
                                         r"or vocab_size smaller$"):
        mixtral.check_limits()
    with pytest.raises(ValueError, match=r"make n_layer, n_embd, d_mlp or vocab_size smaller$"):
        mixtral.replace(n_expert=0).check_limits()
