"""The hook-name accessor: every place it names is a hook the model records, every recorded hook is one of its
places, and the UI and the pages never spell a hook name out."""
import re
from pathlib import Path

import pytest
import torch

from gptviz import act_name, build_model, preset, trace
from gptviz.model.hook_names import Place, act_names, attention_steps, parse_act_name

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = {
    "default": preset("default"),
    "rope": preset("llama-like"),
    "attention-only": preset("default", attn_only=True),
    "post-norm": preset("original-transformer"),
    "decoder-cross-attention": preset("decoder-cross-attention"),
    "encoder": preset("default", n_enc_layer=2, enc_len=6),
    "encoder-rope-post-attn-only": preset("llama-like", n_enc_layer=1, enc_len=5, norm_placement="post",
                                          attn_only=True),
}

ATTN = ["q", "k", "v", "scores_raw", "scores_scaled", "attn_scores", "pattern", "z"]
NORM = ["scale", "normalized", "out"]


def hand_places(c) -> list[tuple[tuple, dict, str]]:
    """(act_name's arguments, its keywords, the hook name) for every place a model of config ``c`` records,
    the names written out by hand (independently of the accessor)."""
    positions = c.pos_encoding in ("learned", "sinusoidal")
    out = [((s,), {}, "hook_" + s) for s in ("embed", "logits", "probs", "loss_per_token", "loss")]
    if positions:
        out.append((("pos_embed",), {}, "hook_pos_embed"))
    if c.norm_placement == "pre":
        out += [((s,), {"part": "ln_final"}, "ln_final.hook_" + s) for s in NORM]
    if c.n_enc_layer >= 0:
        out.append((("enc_out",), {}, "hook_enc_out"))
    if c.n_enc_layer > 0:
        out.append((("enc_embed",), {}, "hook_enc_embed"))
        if positions:
            out.append((("enc_pos_embed",), {}, "hook_enc_pos_embed"))
        if c.norm_placement == "pre":
            out += [((s,), {"part": "ln_final", "encoder": True}, "enc_ln_final.hook_" + s) for s in NORM]
    stacks = [("blocks", {}, c.n_layer)] + ([("enc_blocks", {"encoder": True}, c.n_enc_layer)]
                                            if c.n_enc_layer > 0 else [])
    for prefix, kw, n_layer in stacks:
        cross = c.n_enc_layer >= 0 and not kw
        for l in range(n_layer):
            b = f"{prefix}.{l}."
            resid = ["resid_pre", "attn_out", "resid_mid", "resid_post"] + ([] if c.attn_only else ["mlp_out"])
            resid += ["cross_out", "resid_cross"] if cross else []
            out += [((s, l), kw, b + "hook_" + s) for s in resid]
            attn = (ATTN + (["qkv"] if c.n_enc_layer < 0 else [])
                    + (["rot_q", "rot_k"] if c.pos_encoding == "rope" else []))
            out += [((s, l), kw, b + "attn.hook_" + s) for s in attn]
            out += [((s, l, "attn"), kw, b + "attn.hook_" + s) for s in attn]
            if cross:
                out += [((s, l, "cross_attn"), {}, b + "cross_attn.hook_" + s) for s in ATTN]
            norms = ["ln1"] + ([] if c.attn_only else ["ln2"]) + (["ln_cross"] if cross else [])
            out += [((s, l, norm), kw, f"{b}{norm}.hook_{s}") for norm in norms for s in NORM]
            if not c.attn_only:
                out += [((s, l), kw, b + "mlp.hook_" + s) for s in ("pre", "post")]
                out += [((s, l, "mlp"), kw, b + "mlp.hook_" + s) for s in ("pre", "post")]
    return out


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request):
    c = CONFIGS[request.param]
    model = build_model(c)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, c.vocab_size, (2, 5), generator=g)
    src = {"enc_input": torch.randint(0, c.vocab_size, (2, 4), generator=g)} if c.n_enc_layer > 0 else {}
    return c, model, trace(model, idx, targets=idx, **src)


def test_every_place_the_accessor_names_is_a_recorded_hook(run):
    c, model, tr = run
    recorded = set(tr) | set(model.hook_names())
    for args, kw, name in hand_places(c):
        assert act_name(*args, **kw) == name, (args, kw)
        assert name in recorded, name


def test_every_recorded_hook_is_reachable_through_the_accessor(run):
    c, model, tr = run
    by_hand = {name for _, _, name in hand_places(c)}
    assert set(tr) == by_hand
    for name in [*tr, *model.hook_names()]:
        p = parse_act_name(name)
        assert isinstance(p, Place)
        assert act_name(p.step, p.layer, p.part, encoder=p.encoder) == name


def test_the_ordered_lists_follow_the_forward_pass(run):
    c, model, tr = run
    assert act_names(c, targets=True) == list(tr)
    assert act_names(c) == [n for n in tr if n not in ("hook_probs", "hook_loss_per_token", "hook_loss")]
    for l in range(c.n_layer):
        assert [act_name(s, l) for s in attention_steps(c)] == [n for n in tr if n.startswith(f"blocks.{l}.attn.")]
        if c.n_enc_layer >= 0:
            assert [act_name(s, l, "cross_attn") for s in attention_steps(c, "cross_attn")] == \
                [n for n in tr if n.startswith(f"blocks.{l}.cross_attn.")]
    for l in range(max(0, c.n_enc_layer)):
        assert [act_name(s, l, encoder=True) for s in attention_steps(c, encoder=True)] == \
            [n for n in tr if n.startswith(f"enc_blocks.{l}.attn.")]


def test_examples_from_the_docstring():
    assert act_name("pattern", 2) == "blocks.2.attn.hook_pattern"
    assert act_name("resid_pre", 2) == "blocks.2.hook_resid_pre"
    assert act_name("embed") == "hook_embed"
    assert act_name("scale", 0, "ln1") == "blocks.0.ln1.hook_scale"
    assert act_name("normalized", part="ln_final") == "ln_final.hook_normalized"
    assert act_name("out", 1, "ln_cross") == "blocks.1.ln_cross.hook_out"
    assert act_name("z", 3, "cross_attn") == "blocks.3.cross_attn.hook_z"
    assert act_name("pre", 0, encoder=True) == "enc_blocks.0.mlp.hook_pre"
    assert parse_act_name("enc_ln_final.hook_out") == Place("out", None, "ln_final", True)


@pytest.mark.parametrize("args, kw, words", [
    (("patern", 0), {}, ["'patern'", "layer 0"]),
    (("pattern",), {}, ["'pattern'", "layer"]),
    (("pattern", -1), {}, ["layer -1"]),
    (("pattern", 0, "mlp"), {}, ["'pattern'", "mlp"]),
    (("out", 1), {}, ["'out'", "layer 1", "ln1"]),
    (("embed", 0), {}, ["'embed'", "layer 0"]),
    (("q", 0, "cross_attn"), {"encoder": True}, ["'q'", "encoder", "cross_attn"]),
    (("qkv", 0, "cross_attn"), {}, ["'qkv'", "cross_attn"]),
    (("qkv", 1), {"encoder": True}, ["'qkv'", "encoder", "layer 1"]),
    (("scale", 0, "ln_final"), {}, ["final norm", "'scale'"]),
    (("q", 0, "ln9"), {}, ["'ln9'", "layer 0"]),
])
def test_an_unknown_place_raises_naming_it(args, kw, words):
    with pytest.raises(ValueError) as err:
        act_name(*args, **kw)
    assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("name", ["blocks.0.attn.hook_wrong", "hook_x", "blocks.a.hook_resid_pre", "attn.hook_q",
                                  "enc_blocks.0.cross_attn.hook_q", "blocks.01.hook_resid_pre", "blocks.0.hook_q"])
def test_a_name_no_model_records_does_not_parse(name):
    with pytest.raises(ValueError, match=re.escape(repr(name))):
        parse_act_name(name)


def test_the_ui_and_the_pages_spell_out_no_hook_name():
    """As ``tools/arch.py`` counts them: a quoted string in the ui layer or a page that contains ``hook_…``."""
    hook = re.compile(r"""["'][^"'\n]*hook_[a-z_]+[^"'\n]*["']""")
    files = [*(ROOT / "gptviz" / "ui").rglob("*.py"), *(ROOT / "app_pages").glob("*.py"), ROOT / "app.py"]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files if p.is_file()
             for m in hook.finditer(p.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)
