import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# One torch thread in each test process, and in every server or script a test starts (OMP_NUM_THREADS is inherited).
# scripts/test runs one xdist worker per core, so torch's default of a thread per core would put four threads on two
# cores; for models this small the thread pool's hand-offs cost more than the arithmetic. Measured on this 2-core
# machine beside other work: a 150-step, 2-layer training test took 50.9 s and 28.3 s on two threads, 13.3 s and
# 7.6 s on one (the same test, alternating, 2026-11-27). A test that is about threads sets its own count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

# No test reads anything outside this repository: the tiktoken vocabularies ship in gptviz/text/data/tiktoken.

from leftover_processes import leftovers, set_token  # tests/ is on sys.path (pytest puts conftest's folder there)

from gptviz import GPT, ModelConfig


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    """Set up first, torn down last: every process a test started must be gone once the session ends."""
    if not Path("/proc/self/environ").exists():
        yield
        return
    entry = set_token()
    yield
    left = leftovers(entry)
    assert not left, (f"{len(left)} process(es) started by the tests were still running after the session (now "
                      "killed): " + "; ".join(f"{pid}: {cmd[:200]}" for pid, cmd in sorted(left.items())))

# Together these use every value of every choice field.
CONFIGS = {
    "gpt2-like": ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8),
    "rms-post-sin-gelu": ModelConfig(
        vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8, norm="rmsnorm", norm_placement="post",
        pos_encoding="sinusoidal", activation="gelu", bias=False, qkv_bias=True, tie_weights=False),
    "rope-relu-wide-heads": ModelConfig(
        vocab_size=20, block_size=8, n_layer=2, n_head=3, n_embd=12, d_head=6, d_mlp=20,
        pos_encoding="rope", activation="relu", qkv_bias=False),
    "nopos-rms-pre": ModelConfig(
        vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, norm="rmsnorm", pos_encoding="none",
        bias=False),
    "rope-post-ln": ModelConfig(
        vocab_size=20, block_size=8, n_layer=1, n_head=1, n_embd=6, norm_placement="post", pos_encoding="rope",
        dropout=0.1),
    # Llama / Qwen2's choices: grouped-query attention (2 key/value heads for 4 query heads), a gated MLP (SwiGLU)
    "gqa-swiglu": ModelConfig(
        vocab_size=20, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=16, d_mlp=24, norm="rmsnorm",
        pos_encoding="rope", activation="silu", gated_mlp=True, bias=False, qkv_bias=True, tie_weights=False),
    # GPT-NeoX (Pythia): attention and MLP side by side, rotary positions on a quarter of each head
    "neox-parallel": ModelConfig(
        vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=16, pos_encoding="rope", rotary_pct=0.25,
        parallel_attn=True, activation="gelu", tie_weights=False),
}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def cfg(request):
    return CONFIGS[request.param]


@pytest.fixture
def model(cfg):
    return GPT(cfg)


def random_ids(cfg, B=2, T=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (B, T or cfg.block_size), generator=g)
