"""The code shown to students is gptviz's own source: every shown line stands in a source file, and the shape
comment on the line that records a step names the shape the trace records."""
import re

import pytest
import torch
from conftest import CONFIGS, ROOT

from gptviz import build_model, describe, preset, trace
from gptviz.present.source_code import anchor_line

SOURCES = ["gptviz/model/layers.py", "gptviz/model/gpt.py", "gptviz/model/encoder_decoder.py", "gptviz/run/loss.py",
           "gptviz/model/experts.py"]
SOURCE_LINES = {line.strip() for f in SOURCES for line in (ROOT / f).read_text().splitlines() if line.strip()}

SEQ2SEQ = {
    "decoder-cross-attention": preset("decoder-cross-attention"),
    "encoder 2 layers, pre-norm, learned": preset("decoder-cross-attention").replace(
        n_enc_layer=2, enc_len=5, norm_placement="pre", pos_encoding="learned"),
    "encoder, attention-only, rope": preset("decoder-cross-attention").replace(
        n_enc_layer=1, enc_len=5, attn_only=True, pos_encoding="rope"),
}
LATER = {  # Gemma 2 (norms before and after, scale, both caps, a sliding window), Gemma 3 (QK-norm, local base), OLMo 2
    "gemma2-like": preset("llama-like").replace(n_kv_head=2, gated_mlp=True, sublayer_norms="both", attn_scale_dim=5,
                                                attn_softcap=2.0, final_softcap=3.0, sliding_window=2,
                                                sliding_layers=(0,)),
    "gemma3-like": preset("llama-like").replace(gated_mlp=True, sublayer_norms="both", qk_norm=True, sliding_window=2,
                                                sliding_layers=(0,), rope_local_base=50.0),
    "olmo2-like": preset("llama-like").replace(n_kv_head=2, gated_mlp=True, sublayer_norms="after", qk_norm=True,
                                               qk_norm_full=True),
}
ALL = {**CONFIGS, "default": preset("default"), "attention-only": preset("default").replace(attn_only=True),
       "llama-like": preset("llama-like"), **SEQ2SEQ, **LATER,
       # a mixture of experts in layer 1 only, with a shared expert (Qwen2-MoE), and attention sinks (GPT-OSS)
       "experts, shared expert, sinks": preset("llama-like").replace(n_expert=4, n_expert_active=2, d_expert=8,
                                                                     d_shared_expert=8, moe_layers=[1],
                                                                     attn_sinks=True),
       "experts, plain GELU, not renormalised": preset("default").replace(n_expert=3, n_expert_active=1,
                                                                         expert_renorm=False),
       "GPT-OSS-like experts": preset("llama-like").replace(n_expert=2, n_expert_active=1, activation="gpt_oss_glu",
                                                            attn_sinks=True)}


def shape_comment(line: str) -> str:
    m = re.search(r"#\s*(\([^)]*\))", line)
    assert m, f"no shape comment on {line!r}"
    return m.group(1)


def evaluate(comment: str, env: dict) -> tuple:
    """'(B, nh, T, S)' -> (2, 3, 4, 4): each term evaluated by hand with the sizes in ``env``."""
    inner = comment.strip()[1:-1].strip()
    if not inner:
        return ()
    return tuple(int(eval(term, {"__builtins__": {}}, env)) for term in inner.split(","))


@pytest.mark.parametrize("name", list(ALL))
def test_every_shown_line_is_in_the_source_and_every_shape_comment_is_true(name):
    cfg = ALL[name]
    B, T, S = 2, 4, 5
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(0))
    kw = {"enc_input": torch.randint(0, cfg.vocab_size, (B, S), generator=torch.Generator().manual_seed(1))} \
        if cfg.n_enc_layer > 0 else {}
    tr = trace(model, idx, targets=idx, **kw)
    enc_len = S if cfg.n_enc_layer > 0 else cfg.enc_len
    checked = 0
    for step in tr:
        code = describe(step, cfg).code
        assert code.strip(), step
        for line in code.splitlines():
            assert line.strip() in SOURCE_LINES, (step, line)
        encoder = step.startswith(("enc_blocks.", "hook_enc_", "enc_ln_final."))
        t = enc_len if encoder else T
        s = enc_len if encoder or ".cross_attn." in step else t
        env = {"B": B, "T": t, "S": s, "C": cfg.n_embd, "nh": cfg.n_head, "nkv": cfg.n_kv_head, "hs": cfg.d_head,
               "V": cfg.vocab_size, "d_mlp": cfg.d_mlp, "E": cfg.n_expert}
        assert evaluate(shape_comment(anchor_line(step, cfg)), env) == tr.shape(step), (step, anchor_line(step, cfg))
        checked += 1
    assert checked == len(list(tr)) > 20


def test_a_wrong_shape_comment_or_a_line_not_in_the_source_would_be_caught():
    assert evaluate("(B, nh, T, S)", {"B": 2, "nh": 3, "T": 4, "S": 5}) == (2, 3, 4, 5)
    assert evaluate("(B, T, 3*nh*hs)", {"B": 2, "T": 4, "nh": 3, "hs": 2}) == (2, 4, 18)
    assert evaluate("()", {}) == ()
    assert "y = att @ v" not in SOURCE_LINES  # the old hand-copied line for hook_z is nowhere in the source
    assert "x = x * self.weight + self.bias" not in SOURCE_LINES


def test_a_views_code_is_its_engine_functions_as_they_stand_in_the_file():
    """function_code shows each function's signature and body, read from its own file (docstring left out)."""
    from gptviz.interp import contributions, neurons
    from gptviz.present.source_code import function_code

    shown = function_code(contributions.shares, neurons.logit_effect)
    files = "".join((ROOT / "gptviz" / "interp" / f).read_text(encoding="utf-8") for f in ("contributions.py",
                                                                                           "neurons.py"))
    assert all(line.strip() in files for line in shown.splitlines() if line.strip())
    assert shown.startswith("def shares(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:\n")
    assert "\ndef logit_effect(model, layer: int, n: int) -> np.ndarray:\n" in shown
    assert "return (whole.abs().sum(-1) - (whole - parts - PAIRWISE_EPS).abs().sum(-1)).clamp(min=CLIP)" in shown
    for fn in (contributions.shares, neurons.logit_effect):
        assert fn.__doc__.strip().splitlines()[0] not in shown


def test_sessions_starting_together_parse_the_source_one_at_a_time(monkeypatch):
    """CPython 3.11's parser raised "SystemError: AST constructor recursion depth mismatch" when two sessions of a
    class joining at once parsed gptviz's source together: the parses are serialised. Eight threads ask for the code
    of eight functions at once (nothing cached), through a parser that records how many run at the same moment."""
    import ast
    import threading
    import time

    from gptviz.interp import contributions, neurons
    from gptviz.model import gpt, layers
    from gptviz.present import source_code

    real, running, most = ast.parse, [0], [0]
    lock = threading.Lock()

    def slow_parse(source, *a, **k):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        try:
            return real(source, *a, **k)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(source_code.ast, "parse", slow_parse)
    source_code._statements.cache_clear()
    fns = [gpt.Block.forward, gpt.GPT.run, layers.HeadsAttention.attend, layers.MLP.forward, layers.Norm.forward,
           contributions.shares, neurons.logit_effect, gpt.CausalSelfAttention.forward]
    threads = [threading.Thread(target=source_code.function_code, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    source_code._statements.cache_clear()
    assert most[0] == 1


def test_a_steps_description_is_kept_per_name_and_config_and_follows_the_config():
    """``describe`` keeps what it found per (name, config): asked again, the same object; every step of two configs
    equal to a fresh search; and a config that differs (a sliding window, RMSNorm) gets its own words."""
    import dataclasses

    from gptviz import GPT, ModelConfig, trace
    from gptviz.present import descriptions as d

    a = ModelConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16)
    b = dataclasses.replace(a, norm="rmsnorm", bias=False)
    names = list(trace(GPT(a).eval(), torch.zeros(1, 4, dtype=torch.long)))
    for cfg in (a, b):
        for name in names:
            got = d.describe(name, cfg)
            assert got == d._describe_step.__wrapped__(name, cfg) and d.describe(name, cfg) is got
    assert d.describe("blocks.0.ln1.hook_normalized", a) != d.describe("blocks.0.ln1.hook_normalized", b)
