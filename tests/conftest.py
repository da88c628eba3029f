import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# One torch thread in each test process, and in every server or script a test starts (OMP_NUM_THREADS is inherited).
# scripts/test runs three xdist workers on two cores, so torch's default of a thread per core would put six threads
# on two cores; for models this small the thread pool's hand-offs cost more than the arithmetic. Measured on this 2-core
# machine beside other work: a 150-step, 2-layer training test took 50.9 s and 28.3 s on two threads, 13.3 s and
# 7.6 s on one (the same test, alternating, 2026-11-27). A test that is about threads sets its own count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

# Streamlit's AppTest scans every installed distribution's metadata for v2 components at the start of each AppTest
# (the real server does it once, at startup): about 0.5 s of each page test's 0.7 s on this machine (cProfile of the
# family walk, 2026-11-27). gptviz ships no component and the installed packages do not change while the tests run, so
# the first scan's answer is kept for the process. Streamlit's own test would still see a new package on a new process.
def _scan_once():
    from functools import cache

    from streamlit.components.v2 import manifest_scanner

    manifest_scanner.scan_component_manifests = cache(manifest_scanner.scan_component_manifests)


_scan_once()

# No test reads anything outside this repository: the tiktoken vocabularies ship in gptviz/text/data/tiktoken.

from leftover_processes import leftovers, set_token  # tests/ is on sys.path (pytest puts conftest's folder there)

if os.environ.get("GPTVIZ_PRELOAD"):  # set by tools/mutate.py: the heavy packages the tests import late, now, so
    from lazy_import import preload  # mutmut's forked children inherit them (tests/lazy_import.py)

    preload()

from gptviz import GPT, ModelConfig

# The slowest test files first, slowest first (JUnit times of a fresh clone's full run, 2026-11-27: test_browser.py
# 219 s, test_shipped_models.py 76 s, ... test_selection_browser.py 18 s). scripts/test runs `--dist loadfile
# --no-loadscope-reorder`: each worker takes the next file in this order when it is free, so the long files start
# early instead of one of them keeping a worker busy alone at the end. Only the order changes, never what runs.
SLOW_FILES_FIRST = [
    "browser/test_browser.py", "test_replicas.py", "test_shipped_models.py", "test_load.py",
    "browser/test_live_class_browser.py",
    "app/test_model_folders.py", "app/test_model_folders_moe.py", "app/test_model_folders_later.py", "test_wheel.py",
    "browser/test_old_addresses_browser.py",
    "browser/test_restart_browser.py", "app/test_page_hostile.py", "browser/test_lessons_browser.py",
    "app/test_page_init.py", "test_report.py", "app/test_trace_retention.py",
    "app/test_classroom.py", "test_notebook.py", "browser/test_first_screen_browser.py", "app/test_palette.py",
    "test_lesson_languages.py", "browser/test_selection_browser.py",
]


def slow_first_key(item) -> int:
    """The item's file's place in SLOW_FILES_FIRST (the others after them, in their collected order)."""
    try:
        rel = Path(str(item.path)).resolve().relative_to(ROOT / "tests").as_posix()
    except ValueError:
        return len(SLOW_FILES_FIRST)
    return SLOW_FILES_FIRST.index(rel) if rel in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=slow_first_key)  # stable: within a file, and among the other files, the collected order stays


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
