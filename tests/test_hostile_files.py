"""Hostile files and configs: a small input must never make the server allocate a lot.

Each test builds its input here (real files in tmp_path, real configs) and runs the loader under ``at_most``: the
address space may grow by at most ~1 GB (an allocation past that fails at once instead of eating the machine) and
the call must return within seconds. Every refusal is a ValueError whose message says what is wrong.
"""
import io
import json
import re
import resource
import time
import zipfile
from contextlib import contextmanager

import pytest
import safetensors.torch
import torch

from gptviz import GPT, ModelConfig
from gptviz.config import MAX_TABLE_BYTES
from gptviz.model.checkpoint import MAX_HEADER_BYTES, checkpoint_bytes, load_checkpoint, save_checkpoint
from gptviz.paths import CHECKPOINTS

TINY = ModelConfig(vocab_size=8, block_size=8, n_layer=1, n_head=1, n_embd=4)
HUGE_BLOCK = 150_000  # a block_size × block_size bool mask would be 22.5 GB
ROPE_BOMB = dict(pos_encoding="rope", n_embd=2, n_head=1, d_head=1_000_000, block_size=2048)  # an 8 GB rotary table


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        return int(re.search(r"VmSize:\s+(\d+) kB", f.read()).group(1)) * 1024


@contextmanager
def at_most(extra_bytes: int = 1_000_000_000, seconds: float = 20.0):
    """Run the block with the address space capped at its current size + ``extra_bytes``, and in ``seconds``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_bytes() + extra_bytes
    for limit in (soft, hard):
        if limit != resource.RLIM_INFINITY:
            cap = min(cap, limit)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    start = time.perf_counter()
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert time.perf_counter() - start < seconds


def refused(src, match: str, **kw) -> str:
    """Load ``src`` under the memory cap; it must be refused with a ValueError matching ``match``."""
    with at_most(), pytest.raises(ValueError, match=match) as info:
        load_checkpoint(src, **kw)
    return str(info.value)


# --------------------------------------------------------------------------- 1. buffers are counted
def test_a_huge_block_size_builds_no_block_size_squared_mask():
    """block_size=150,000 used to build a 150,000² mask (22.5 GB). Now the mask is T × T, built per forward pass,
    and the model gives exactly the numbers of the same model with a short block."""
    big, small = TINY.replace(block_size=HUGE_BLOCK, pos_encoding="none"), TINY.replace(pos_encoding="none")
    with at_most():
        m = GPT(big)
        assert not any(b.numel() >= HUGE_BLOCK for b in m.buffers())
        idx = torch.tensor([[1, 2, 3, 4, 5], [7, 6, 5, 4, 3]])
        mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
        logits = m(idx, attention_mask=mask)[0]
    assert torch.equal(logits, GPT(small)(idx, attention_mask=mask)[0])


@pytest.mark.parametrize("changes", [ROPE_BOMB, dict(pos_encoding="sinusoidal", n_embd=64, block_size=1_000_000)],
                         ids=["rope", "sinusoidal"])
def test_position_tables_over_the_limit_are_refused_before_they_are_built(changes):
    cfg = TINY.replace(**changes)
    assert cfg.num_params() < 50_000_000  # the parameters pass: only the tables are too big
    with at_most(), pytest.raises(ValueError, match=r"position tables .* GB, over the limit of 1 GB: make block_size"):
        GPT(cfg)
    assert cfg.table_bytes() > MAX_TABLE_BYTES


# --------------------------------------------------------------------------- 2. a small checkpoint, a big config
def test_a_nanogpt_ckpt_whose_model_args_say_block_size_150000(tmp_path):
    m = GPT(TINY.replace(activation="gelu"))
    ckpt = {"model": m.state_dict(), "iter_num": 1,
            "model_args": dict(n_layer=1, n_head=1, n_embd=4, block_size=HUGE_BLOCK, bias=True, vocab_size=8)}
    p = tmp_path / "ckpt.pt"
    torch.save(ckpt, p)
    assert p.stat().st_size < 10_000
    msg = refused(p, r"transformer\.wpe\.weight has shape \(8, 4\), but the checkpoint's model_args asks for "
                     r"\(150000, 4\)")
    assert "150000" in msg


@pytest.mark.parametrize("changes,match", [
    (dict(block_size=HUGE_BLOCK), r"transformer\.wpe\.weight has shape \(8, 4\), but the checkpoint's config asks"),
    (ROPE_BOMB, r"rope position tables .* over the limit"),
], ids=["block_size", "rope"])
def test_a_gptviz_checkpoint_whose_header_config_is_huge(tmp_path, changes, match):
    m = GPT(TINY)
    sd = {k: v.contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}
    header = {"format": "gptviz-1", "config": json.dumps(TINY.replace(**changes).to_dict()), "tokenizer": "{}",
              "meta": "{}"}
    p = tmp_path / "small.safetensors"
    safetensors.torch.save_file(sd, str(p), metadata=header)
    assert p.stat().st_size < 10_000
    refused(p, match)


def test_a_hugging_face_file_whose_wpe_is_150000_by_1_uint8(tmp_path):
    sd = {"wte.weight": torch.zeros(8, 1), "wpe.weight": torch.zeros(HUGE_BLOCK, 1, dtype=torch.uint8),
          "h.0.ln_1.weight": torch.ones(1), "h.0.mlp.c_fc.weight": torch.zeros(1, 4)}
    p = tmp_path / "model.safetensors"
    safetensors.torch.save_file(sd, str(p))
    refused(p, r"wpe\.weight must be a 2-D floating-point tensor, not \(150000, 1\) of torch\.uint8")
    # the same as float: the shapes say GPT-2 of n_embd=1, and the file lacks nearly all of its tensors
    sd["wpe.weight"] = torch.zeros(HUGE_BLOCK, 1)
    safetensors.torch.save_file(sd, str(p))
    refused(p, r"the weights lack transformer\.h\.0\.attn\.c_attn\.bias.*which GPT-2 with n_embd=1")


# --------------------------------------------------------------------------- 3. a zip bomb
def _repacked(data: bytes, compression: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", compression) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def test_a_pt_archive_repacked_with_deflate_is_refused_unread(tmp_path):
    buf = io.BytesIO()
    torch.save({"model": {"w": torch.zeros(5_000_000)}, "model_args": {}}, buf)  # 20 MB of zeros
    bomb = _repacked(buf.getvalue(), zipfile.ZIP_DEFLATED)
    assert len(bomb) < 100_000  # 20 MB in under 100 KB: a 30 MB upload would inflate to ~30 GB
    msg = refused(bomb, r"compressed entries .*zip bomb.*refused unread", name="ckpt.pt")
    assert "archive/data.pkl" in msg
    # the same archive stored, as torch.save writes it, is read (and refused for what it holds, not how)
    refused(_repacked(buf.getvalue(), zipfile.ZIP_STORED), "model_args are incomplete", name="ckpt.pt")


def test_an_old_format_pt_file_is_refused_unread(tmp_path):
    """The pre-1.6 format allocates each storage at the size its pickle declares before reading it."""
    p = tmp_path / "old.pt"
    torch.save({"wte.weight": torch.zeros(2, 2)}, p, _use_new_zipfile_serialization=False)
    refused(p, r"not a readable PyTorch checkpoint .*zip archive torch\.save has written since PyTorch 1\.6")


# --------------------------------------------------------------------------- 4. the header, and clear failures
def test_a_safetensors_header_over_1_mb_is_refused_before_it_is_parsed(tmp_path):
    p = tmp_path / "notes.safetensors"
    save_checkpoint(p, GPT(TINY), notes="x" * 2 * MAX_HEADER_BYTES)
    size = int.from_bytes(p.read_bytes()[:8], "little")
    assert size > 2 * MAX_HEADER_BYTES
    refused(p, f"header is {size:,} bytes, over the limit of {MAX_HEADER_BYTES:,}: it was refused unread")


def test_a_hugging_face_file_without_the_mlp_says_so(tmp_path):
    sd = {"wte.weight": torch.zeros(8, 4), "wpe.weight": torch.zeros(8, 4), "h.0.ln_1.weight": torch.ones(4)}
    p = tmp_path / "model.safetensors"
    safetensors.torch.save_file(sd, str(p))
    refused(p, r"these GPT-2 weights lack h\.0\.mlp\.c_fc\.weight")


@pytest.mark.parametrize("ckpt,match", [
    ({"model": [torch.zeros(2)], "model_args": {}}, "model must be a state_dict .*not list"),
    ({"model": torch.zeros(2), "model_args": {}}, "model must be a state_dict .*not Tensor"),
    ({"model": {}, "model_args": [8, 8]}, "model_args must be a dict, not list"),
    ({"model": {}, "model_args": dict(vocab_size="many", block_size=8, n_layer=1, n_head=1, n_embd=4)},
     "model_args are not whole numbers"),
], ids=["model-list", "model-tensor", "args-list", "args-text"])
def test_a_nanogpt_ckpt_of_the_wrong_shape_says_so(tmp_path, ckpt, match):
    p = tmp_path / "ckpt.pt"
    torch.save(ckpt, p)
    refused(p, f"nanoGPT checkpoint's {match}")


@pytest.mark.parametrize("field,value,match", [
    ("meta", "[1, 2]", "meta must be a JSON object, not list"),
    ("meta", "not json", "meta is not readable JSON"),
    ("tokenizer", '"gpt2"', "tokenizer must be a JSON object, not str"),
    ("config", "[" * 100_000, "config is not readable JSON"),
], ids=["meta-list", "meta-text", "tokenizer-str", "config-deep"])
def test_a_gptviz_header_whose_parts_are_not_objects_says_so(field, value, match):
    m = GPT(TINY)
    st_bytes = checkpoint_bytes(m)
    sd = safetensors.torch.load(st_bytes)
    header = {"format": "gptviz-1", "config": m.config.to_json(), "tokenizer": "{}", "meta": "{}", field: value}
    refused(safetensors.torch.save(sd, metadata=header), f"the gptviz checkpoint's {match}", name="m.safetensors")


# --------------------------------------------------------------------------- 5. shipped checkpoints by name only
def test_only_shipped_checkpoint_names_are_loaded_by_link(tmp_path):
    from gptviz.present.report import Store
    from gptviz.ui import resources

    outside = tmp_path / "elsewhere"
    save_checkpoint(outside.with_suffix(".safetensors"), GPT(TINY))  # a readable checkpoint outside checkpoints/
    shipped = resources.shipped_names()
    assert "text" in shipped and "induction-heads.snapshots" not in shipped
    for load in (resources.shipped_checkpoint, Store().shipped_checkpoint):
        for name in (str(outside), " " + str(outside), f"../{CHECKPOINTS.name}/text", "induction-heads.snapshots",
                     "", "text.safetensors"):
            with pytest.raises(ValueError, match="there is no shipped checkpoint") as info:
                load(name)
            msg = str(info.value)
            assert f"(choose one of {', '.join(shipped)})" in msg
            assert "/" not in msg and str(tmp_path) not in msg
        assert load("text") == "ckpt-text"
