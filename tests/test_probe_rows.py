"""The head detector's probe on a big model: as many of its 8 rows as one text change's arithmetic budget allows.

A Qwen3-0.6B shape (596,049,920 parameters) costs 77.2 GFLOP a row of 64 tokens (``forward_flops``, itself checked
against torch's FlopCounterMode in test_forward_flops_oracle.py): 8 rows would be 618 GFLOP, 5 s and more on two
cores before the Attention or Home page's first view; 2 rows are 154, within the 160 GFLOP a text change may cost."""
import numpy as np
import pytest
import torch

from gptviz.config import ModelConfig, preset
from gptviz.interp import head_detector
from gptviz.interp.head_detector import PROBE_ROWS
from gptviz.model.gpt import GPT
from gptviz.present.page_context import probe_rows

QWEN3_SHAPE = ModelConfig(vocab_size=151936, block_size=4096, n_layer=28, n_head=16, n_kv_head=8, n_embd=1024,
                          d_head=128, d_mlp=3072, gated_mlp=True, norm="rmsnorm", pos_encoding="rope", bias=False,
                          qk_norm=True)


def test_a_big_model_gets_two_rows_and_the_small_ones_keep_eight():
    assert QWEN3_SHAPE.num_params() == 596_049_920
    row = QWEN3_SHAPE.forward_flops(1, 64)
    assert 77e9 < row < 77.5e9 and 4 * row > 160e9 >= 2 * row
    assert probe_rows(QWEN3_SHAPE) == 2
    assert PROBE_ROWS == 8
    assert probe_rows(ModelConfig()) == 8 == probe_rows(preset("gpt2-small", vocab_size=50257))


def test_a_smaller_budget_gives_fewer_rows_and_never_none(monkeypatch):
    gpt2 = preset("gpt2-small", vocab_size=50257)  # 16.1 GFLOP a row of 64 tokens
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "40")
    assert probe_rows(gpt2) == 2
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "10")
    assert probe_rows(gpt2) == 1
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "10000")
    assert probe_rows(QWEN3_SHAPE) == 8


def test_a_model_with_a_short_context_probes_what_fits(monkeypatch):
    """A 16-token context probes 8 tokens twice: 8 rows of 16 fit 10 GFLOP where 8 rows of 64 would not."""
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "10")
    short = ModelConfig(vocab_size=1000, block_size=16, n_layer=8, n_head=8, n_embd=512)
    assert 8 * short.forward_flops(1, 16) <= 10e9 < 8 * short.forward_flops(1, 64)
    assert probe_rows(short) == 8
    cfg = ModelConfig(vocab_size=50, block_size=10, n_layer=1, n_head=2, n_embd=8)
    assert probe_rows(cfg) == 8
    out = head_detector.probe(GPT(cfg), batch=probe_rows(cfg))
    assert out["n"] == 5 and out["batch"] == 8


@pytest.mark.parametrize("rows", [1, 2])
def test_the_probe_runs_the_rows_it_is_given(rows):
    cfg = ModelConfig(vocab_size=50, block_size=64, n_layer=2, n_head=2, n_embd=16)
    out = head_detector.probe(GPT(cfg), batch=rows)
    assert out["batch"] == rows and out["scores"]["induction"].shape == (2, 2)


def test_detect_takes_the_probes_scores_from_the_rows_it_is_given():
    """detect(probe_batch=2) reads induction and duplicate from a 2-row probe: the scores of probe(batch=2), which a
    differently seeded 8-row probe does not give."""
    from gptviz.run.trace import trace

    cfg = ModelConfig(vocab_size=50, block_size=64, n_layer=2, n_head=2, n_embd=16)
    m = GPT(cfg)
    tr = trace(m, torch.randint(0, 50, (1, 10), generator=torch.Generator().manual_seed(0)))
    got = head_detector.detect(tr, probe_model=m, probe_batch=2)
    two, eight = head_detector.probe(m, batch=2)["scores"], head_detector.probe(m)["scores"]
    for kind in ("induction", "duplicate"):
        np.testing.assert_array_equal(got[kind], two[kind])
    assert not np.array_equal(two["induction"], eight["induction"])
