"""Checkpoints: round trips, foreign formats, and refusing what could run code."""
import io
import os
import pickle

import pytest
import torch
from lazy_import import lazy

transformers = lazy("transformers")  # pinned in requirements-dev.txt: missing, the tests fail, not skip
from conftest import CONFIGS, random_ids

from gptviz import GPT, CharBPETokenizer, ModelConfig, trace
from gptviz.model.checkpoint import load_checkpoint, save_checkpoint


def perturb(model, seed=0):
    """Move every bias and norm weight away from its init (0 and 1), as test_parity_hf does: otherwise a
    swapped bias, or ln_1 loaded as ln_2, would give the very same logits and pass. Returns the model."""
    g = torch.Generator().manual_seed(seed)
    moved = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name or "ln_f" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
                moved += 1
    assert moved, "nothing to perturb: the fixture has no biases or norm weights"
    return model


def test_a_safetensors_file_whose_header_length_starts_with_pickles_byte_loads(tmp_path):
    """The header length's first byte (little-endian) can be 0x80, the first byte of a pickle: still safetensors."""
    m, tok, p = GPT(CONFIGS["gpt2-like"]), CharBPETokenizer(3).train(["abcabcabd"]), tmp_path / "m.safetensors"
    for n in range(256):
        save_checkpoint(p, m, tok, task="x" * n)
        if p.read_bytes()[:1] == b"\x80":
            break
    assert p.read_bytes()[:1] == b"\x80" and p.read_bytes()[8:9] == b"{"
    assert load_checkpoint(p).meta["task"] == "x" * n


@pytest.mark.parametrize("name", ["gpt2-like", "rms-post-sin-gelu", "rope-relu-wide-heads"])
def test_round_trip_gives_identical_logits(tmp_path, name):
    c = CONFIGS[name].replace(seed=7)
    m = perturb(GPT(c))
    tok = CharBPETokenizer(3).train(["abcabcabd"])
    p = tmp_path / "m.safetensors"
    save_checkpoint(p, m, tok, task="demo")
    ck = load_checkpoint(p)
    assert ck.config == c and ck.meta == {"task": "demo"} and ck.kind == "gptviz"
    assert ck.tokenizer.vocab == tok.vocab and ck.tokenizer.merges == tok.merges
    idx = random_ids(c)
    assert torch.equal(trace(ck.model, idx)["hook_logits"], trace(m, idx)["hook_logits"])
    # from bytes too, as an upload arrives
    assert torch.equal(load_checkpoint(p.read_bytes(), name="m.safetensors").model(idx)[0], m(idx)[0])


def test_nanogpt_ckpt_pt(tmp_path):
    c = CONFIGS["gpt2-like"].replace(activation="gelu", vocab_size=20)
    m = perturb(GPT(c))
    sd = {("_orig_mod." + k): v for k, v in m.state_dict().items()}  # as torch.compile leaves them
    ckpt = {"model": sd, "model_args": dict(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd,
                                            block_size=c.block_size, bias=True, vocab_size=c.vocab_size, dropout=0.0),
            "iter_num": 5000, "best_val_loss": torch.tensor(1.5), "config": {"dataset": "shakespeare_char"}}
    p = tmp_path / "ckpt.pt"
    torch.save(ckpt, p)
    ck = load_checkpoint(p)
    assert ck.kind == "nanogpt" and ck.meta["iter_num"] == 5000
    idx = random_ids(c)
    assert torch.allclose(ck.model(idx)[0], m(idx)[0])


def test_hf_gpt2_safetensors(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=40, n_positions=12, n_embd=32, n_layer=2, n_head=4)
    torch.manual_seed(0)
    hf = perturb(transformers.GPT2LMHeadModel(cfg).eval())
    from safetensors.torch import save_file

    sd = {k.removeprefix("transformer."): v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    p = tmp_path / "model.safetensors"
    save_file(sd, str(p), metadata={"format": "pt"})
    ck = load_checkpoint(p, n_head=4)
    idx = torch.randint(0, 40, (2, 10))
    with torch.no_grad():
        assert torch.allclose(ck.model(idx)[0], hf(idx).logits, atol=1e-5)
    assert ck.kind == "hf-gpt2"


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    p = tmp_path / "evil.pt"
    torch.save({"model": Evil(), "model_args": {}}, p)
    with pytest.raises(ValueError, match="refused unread"):
        load_checkpoint(p)
    plain = tmp_path / "evil.pkl.pt"
    plain.write_bytes(pickle.dumps({"x": Evil()}))
    with pytest.raises(ValueError):
        load_checkpoint(plain)
    assert not marker.exists()


def test_truncated_and_wrong_files_get_clear_errors(tmp_path):
    m = GPT(CONFIGS["gpt2-like"])
    p = tmp_path / "m.safetensors"
    save_checkpoint(p, m)
    data = p.read_bytes()
    with pytest.raises(ValueError, match="not a readable .safetensors"):
        load_checkpoint(data[: len(data) // 2], name="m.safetensors")
    with pytest.raises(ValueError, match="not a readable .safetensors"):
        load_checkpoint(b"hello, this is a text file", name="notes.safetensors")
    with pytest.raises(ValueError, match="empty"):
        load_checkpoint(b"", name="x.safetensors")
    buf = io.BytesIO()
    torch.save({"a": torch.zeros(2)}, buf)
    with pytest.raises(ValueError, match="not a readable PyTorch checkpoint"):
        load_checkpoint(buf.getvalue()[:100], name="x.pt")
    with pytest.raises(ValueError, match="neither a gptviz checkpoint nor GPT-2"):
        load_checkpoint(buf.getvalue(), name="x.pt")
    with pytest.raises(ValueError, match="no such file"):
        load_checkpoint(tmp_path / "missing.safetensors")


def test_a_gpt2_file_with_64_wide_embeddings_and_4_heads_is_never_read_as_one_head(tmp_path):
    """The file alone can't say its heads: it used to be guessed as n_embd / 64 = 1 head, logits off by ~0.1. Now it
    is refused with a message saying what to do; with the heads given (or its folder opened, test_pretrained) the
    logits equal transformers'."""
    cfg = transformers.GPT2Config(vocab_size=40, n_positions=12, n_embd=64, n_layer=2, n_head=4)
    torch.manual_seed(0)
    hf = perturb(transformers.GPT2LMHeadModel(cfg).eval())
    from safetensors.torch import save_file

    p = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}, str(p))
    with pytest.raises(ValueError, match="does not say how many heads it has"):
        load_checkpoint(p)
    idx = torch.randint(0, 40, (2, 10))
    with torch.no_grad():
        assert (load_checkpoint(p, n_head=4).model(idx)[0] - hf(idx).logits).abs().max() < 1e-5
        assert (load_checkpoint(p, n_head=1).model(idx)[0] - hf(idx).logits).abs().max() > 1e-4  # the old guess


def test_a_safetensors_file_whose_first_byte_is_a_pickles_still_loads(tmp_path):
    """A safetensors file opens with its header's length; when that length's low byte is 0x80 (a pickle's first byte,
    one file in 256: the MoE checkpoint's first save was one) it is still read as safetensors."""
    model = GPT(ModelConfig(n_layer=1, vocab_size=20, n_embd=8, n_head=2, block_size=8))
    path = tmp_path / "m.safetensors"
    for n in range(256):
        save_checkpoint(path, model, None, pad="x" * n)
        if path.read_bytes()[:1] == b"\x80":
            break
    assert path.read_bytes()[:1] == b"\x80"
    loaded = load_checkpoint(path)
    assert loaded.meta["pad"] == "x" * n
    assert torch.equal(loaded.model.lm_head.weight, model.lm_head.weight)
