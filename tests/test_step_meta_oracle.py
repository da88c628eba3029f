"""The facts of a recorded step read from its hook name (gptviz.run.step_meta), against tables written out by hand.

The oracle is the hook-name scheme itself, spelt out here name by name: which stage and layer a name belongs to,
which stack (decoder or encoder), its axes (source positions for the encoder's steps and cross-attention's keys),
how its values are coloured, and for grouped-query attention how many query heads share a key/value head and how
the fused projection splits. Nothing here calls the model: every expected value is typed in."""
import pytest

from gptviz import ModelConfig
from gptviz.run.step_meta import StepMeta, split_name, step_meta

# a decoder-only model with grouped-query attention: 6 query heads, 2 key/value heads of 4 dims (3 per group)
GQA = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=6, n_kv_head=2, n_embd=24, d_head=4)
GQA_QK = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=6, n_kv_head=2, n_embd=24, d_head=4, qk_norm=True)
PLAIN = ModelConfig(vocab_size=20, block_size=8, n_layer=12, n_head=2, n_embd=8)
SEQ2SEQ = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8, n_enc_layer=2)
FIXED_ENC = ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8, n_enc_layer=0)
ONE_ENC = ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8, n_enc_layer=1)  # one encoder block

BTC = ("batch", "pos", "d_model")
BTHD = ("batch", "pos", "head", "d_head")
BHQK = ("batch", "head", "query_pos", "key_pos")

# (config, name) -> (stage, layer, axes, kind, stack, head_group, qkv_split), typed out by hand
EXPECTED = [
    (PLAIN, "hook_embed", ("embed", None, BTC, "signed", "decoder", 1, ())),
    (PLAIN, "hook_pos_embed", ("embed", None, BTC, "signed", "decoder", 1, ())),
    (PLAIN, "blocks.0.hook_resid_pre", ("residual", 0, BTC, "signed", "decoder", 1, ())),
    (PLAIN, "blocks.11.hook_resid_post", ("residual", 11, BTC, "signed", "decoder", 1, ())),  # two digits
    (PLAIN, "blocks.1.ln1.hook_scale", ("norm", 1, ("batch", "pos", "scale"), "nonnegative", "decoder", 1, ())),
    (PLAIN, "ln_final.hook_normalized", ("norm", None, BTC, "signed", "decoder", 1, ())),
    (PLAIN, "blocks.3.attn.hook_qkv", ("attention", 3, ("batch", "pos", "qkv"), "signed", "decoder", 1, ())),
    (PLAIN, "blocks.0.attn.hook_k", ("attention", 0, BTHD, "signed", "decoder", 1, ())),  # no GQA: group 1
    (PLAIN, "blocks.2.attn.hook_attn_scores", ("attention", 2, BHQK, "masked", "decoder", 1, ())),
    (PLAIN, "blocks.2.attn.hook_pattern", ("attention", 2, BHQK, "probability", "decoder", 1, ())),
    (PLAIN, "blocks.0.mlp.hook_pre_linear", ("mlp", 0, ("batch", "pos", "d_mlp"), "signed", "decoder", 1, ())),
    (PLAIN, "blocks.0.hook_mlp_out", ("mlp", 0, BTC, "signed", "decoder", 1, ())),
    (PLAIN, "hook_logits", ("output", None, ("batch", "pos", "vocab"), "signed", "decoder", 1, ())),
    (PLAIN, "hook_probs", ("loss", None, ("batch", "pos", "vocab"), "probability", "decoder", 1, ())),
    (PLAIN, "hook_loss_per_token", ("loss", None, ("batch", "pos"), "nonnegative", "decoder", 1, ())),
    (PLAIN, "hook_loss", ("loss", None, (), "nonnegative", "decoder", 1, ())),
    # grouped-query attention: keys and values (and the rotated keys) serve 6 / 2 = 3 query heads each
    (GQA, "blocks.1.attn.hook_k", ("attention", 1, BTHD, "signed", "decoder", 3, ())),
    (GQA, "blocks.1.attn.hook_v", ("attention", 1, BTHD, "signed", "decoder", 3, ())),
    (GQA, "blocks.0.attn.hook_rot_k", ("attention", 0, BTHD, "signed", "decoder", 3, ())),
    (GQA_QK, "blocks.1.attn.hook_k_normed", ("attention", 1, BTHD, "signed", "decoder", 3, ())),  # QK-norm's keys
    (GQA_QK, "blocks.1.attn.hook_q_normed", ("attention", 1, BTHD, "signed", "decoder", 1, ())),
    (GQA, "blocks.0.attn.hook_q", ("attention", 0, BTHD, "signed", "decoder", 1, ())),
    (GQA, "blocks.0.attn.hook_rot_q", ("attention", 0, BTHD, "signed", "decoder", 1, ())),
    (GQA, "blocks.0.attn.hook_k_rep", ("attention", 0, BTHD, "signed", "decoder", 1, ())),
    (GQA, "blocks.0.attn.hook_z", ("attention", 0, BTHD, "signed", "decoder", 1, ())),
    # the fused projection: q is 6 × 4 wide, k and v 2 × 4 each
    (GQA, "blocks.1.attn.hook_qkv", ("attention", 1, ("batch", "pos", "qkv"), "signed", "decoder", 1, (24, 8, 8))),
    # encoder-decoder: the encoder's steps run over source positions
    (SEQ2SEQ, "enc_blocks.1.attn.hook_q", ("attention", 1, ("batch", "enc_pos", "head", "d_head"), "signed",
                                          "encoder", 1, ())),
    (SEQ2SEQ, "enc_blocks.0.hook_resid_pre", ("residual", 0, ("batch", "enc_pos", "d_model"), "signed",
                                             "encoder", 1, ())),
    (SEQ2SEQ, "enc_blocks.0.attn.hook_pattern", ("attention", 0, BHQK, "probability", "encoder", 1, ())),
    (SEQ2SEQ, "hook_enc_embed", ("embed", None, ("batch", "enc_pos", "d_model"), "signed", "encoder", 1, ())),
    (SEQ2SEQ, "hook_enc_pos_embed", ("embed", None, ("batch", "enc_pos", "d_model"), "signed", "encoder", 1, ())),
    (SEQ2SEQ, "hook_enc_out", ("encoder", None, ("batch", "enc_pos", "d_model"), "signed", "encoder", 1, ())),
    (SEQ2SEQ, "enc_ln_final.hook_scale", ("norm", None, ("batch", "enc_pos", "scale"), "nonnegative", "encoder",
                                         1, ())),
    (SEQ2SEQ, "ln_final.hook_out", ("norm", None, BTC, "signed", "decoder", 1, ())),
    # cross-attention: queries over the decoder's positions, keys and values over the encoder's
    (SEQ2SEQ, "blocks.1.cross_attn.hook_q", ("cross_attention", 1, BTHD, "signed", "decoder", 1, ())),
    (SEQ2SEQ, "blocks.1.cross_attn.hook_k", ("cross_attention", 1, ("batch", "enc_pos", "head", "d_head"), "signed",
                                            "decoder", 1, ())),
    (SEQ2SEQ, "blocks.0.cross_attn.hook_scores_raw", ("cross_attention", 0, ("batch", "head", "query_pos", "enc_pos"),
                                                     "signed", "decoder", 1, ())),
    (SEQ2SEQ, "blocks.0.cross_attn.hook_pattern", ("cross_attention", 0, ("batch", "head", "query_pos", "enc_pos"),
                                                  "probability", "decoder", 1, ())),
    (SEQ2SEQ, "blocks.0.cross_attn.hook_z", ("cross_attention", 0, BTHD, "signed", "decoder", 1, ())),
    (SEQ2SEQ, "blocks.0.ln_cross.hook_out", ("norm", 0, BTC, "signed", "decoder", 1, ())),
    (SEQ2SEQ, "blocks.0.hook_resid_cross", ("residual", 0, BTC, "signed", "decoder", 1, ())),
    (SEQ2SEQ, "blocks.0.attn.hook_q", ("attention", 0, BTHD, "signed", "decoder", 1, ())),
    # a fixed random encoder output (n_enc_layer=0): no encoder blocks, but the encoder's output is a step
    (FIXED_ENC, "hook_enc_out", ("encoder", None, ("batch", "enc_pos", "d_model"), "signed", "encoder", 1, ())),
]


@pytest.mark.parametrize("cfg, name, facts", EXPECTED, ids=[f"{n}-{i}" for i, (_, n, _) in enumerate(EXPECTED)])
def test_each_hook_name_gives_its_stage_layer_axes_kind_stack_and_head_group(cfg, name, facts):
    m = step_meta(name, cfg)
    assert m == StepMeta(name, *facts)
    assert type(m.head_group) is int  # a count of heads, not 3.0


@pytest.mark.parametrize("kind, signed, probability, masked", [
    ("signed", True, False, False), ("masked", True, False, True), ("probability", False, True, False),
    ("nonnegative", False, False, False)])
def test_the_colour_properties_follow_the_kind(kind, signed, probability, masked):
    """Signed values (and masked scores, signed with −∞) get a diverging scale; probabilities 0 to 1."""
    m = StepMeta("x", "attention", 0, BHQK, kind)
    assert (m.signed, m.probability, m.masked) == (signed, probability, masked)
    assert m.stack == "decoder" and m.head_group == 1 and m.qkv_split == ()  # the defaults


@pytest.mark.parametrize("cfg, name, expected", [
    (PLAIN, "blocks.2.attn.hook_q", (2, "attn.hook_q", "decoder")),
    (PLAIN, "hook_embed", (None, "hook_embed", "decoder")),
    (PLAIN, "enc_blocks.0.attn.hook_q", (None, "enc_blocks.0.attn.hook_q", "decoder")),  # no encoder: not a layer
    (SEQ2SEQ, "enc_blocks.1.hook_resid_post", (1, "hook_resid_post", "encoder")),
    (SEQ2SEQ, "blocks.1.cross_attn.hook_k", (1, "cross_attn.hook_k", "decoder")),
    (SEQ2SEQ, "hook_enc_embed", (None, "hook_enc_embed", "encoder")),
    (SEQ2SEQ, "enc_ln_final.hook_out", (None, "enc_ln_final.hook_out", "encoder")),
    (SEQ2SEQ, "ln_final.hook_out", (None, "ln_final.hook_out", "decoder")),
    (FIXED_ENC, "enc_blocks.0.attn.hook_q", (None, "enc_blocks.0.attn.hook_q", "decoder")),  # no encoder blocks
    (ONE_ENC, "enc_blocks.0.attn.hook_q", (0, "attn.hook_q", "encoder")),
    (FIXED_ENC, "hook_enc_out", (None, "hook_enc_out", "encoder")),
])
def test_split_name_gives_layer_rest_and_stack(cfg, name, expected):
    assert split_name(name, cfg) == expected


@pytest.mark.parametrize("cfg, name", [
    (PLAIN, "blocks.0.attn.hook_nope"),
    (PLAIN, "hook_enc_embed"),  # an encoder-decoder model's step, in a decoder-only model
    (PLAIN, "blocks.0.cross_attn.hook_q"),
    (PLAIN, "blocks.0.hook_resid_cross"),
    (PLAIN, "enc_blocks.0.hook_resid_pre"),
    (PLAIN, "xblocks.0.hook_resid_pre"),
    (SEQ2SEQ, "blocks.0.attn.hook_qkv"),  # an encoder-decoder model's self-attention has no fused projection step
    (SEQ2SEQ, "blocks.0.cross_attn.hook_qkv"),
    (SEQ2SEQ, "blocks.0.cross_attn.hook_rot_q"),
    (SEQ2SEQ, "blocks.0.cross_attn.hook_k_rep"),
    (FIXED_ENC, "enc_blocks.0.hook_resid_pre"),
])
def test_a_name_the_model_cannot_have_is_refused_naming_it(cfg, name):
    with pytest.raises(ValueError) as e:
        step_meta(name, cfg)
    assert str(e.value) == f"{name!r} is not a step gptviz knows"


def test_the_facts_kept_per_config_are_the_hand_written_ones_and_each_config_keeps_its_own():
    """``step_metas`` (what a trace asks for, ~100 names a run) keeps the facts per config: every name gives the
    hand-written facts on a first and a later call, in the order asked, two configs sharing names keep their own,
    and a name a model cannot have is still refused."""
    from gptviz.run.step_meta import step_metas

    by_cfg: dict = {}
    for cfg, name, facts in EXPECTED:
        by_cfg.setdefault(cfg, []).append((name, facts))
    first = {}
    for _ in range(2):  # a first call and a kept one: the same objects, not made again
        for cfg, pairs in by_cfg.items():
            got = step_metas([n for n, _ in pairs], cfg)
            assert list(got) == [n for n, _ in pairs]
            assert all(got[n] == StepMeta(n, *facts) for n, facts in pairs), cfg
            assert all(got[n] is first.setdefault((cfg, n), got[n]) for n, _ in pairs), cfg
    shared = "blocks.0.attn.hook_k"  # GQA's facts (a group of 3) are not PLAIN's (1), asked for in either order
    assert step_metas([shared], PLAIN)[shared].head_group == 1
    assert step_metas([shared], GQA)[shared].head_group == 3
    assert step_metas([shared], PLAIN)[shared].head_group == 1
    with pytest.raises(ValueError) as e:
        step_metas(["hook_embed", "blocks.0.attn.hook_nope"], PLAIN)
    assert str(e.value) == "'blocks.0.attn.hook_nope' is not a step gptviz knows"
