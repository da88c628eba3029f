"""Composition scores (gptviz/interp/composition.py) against TransformerLens's definition, written out here by hand:
``HookedTransformer.all_composition_scores(mode)`` is ``composition_scores(OV, right)`` with ``right`` = QK (Q), QKᵀ
(K) or OV (V), each a d_model × d_model matrix per head (``OV = W_V W_O``, ``QK = W_Q W_Kᵀ``), the score
``‖left @ right‖_F / (‖left‖_F ‖right‖_F)``, masked to 0 unless the left head's layer is before the right head's.

Here every matrix is built densely in float64, head pair by head pair, from the model's weights sliced by hand; the
module computes the same norms from d_head × d_head Gram matrices. The weights sliced here are also checked against
the model's own recorded steps (the raw scores and attention's output), so a wrong slice cannot agree with itself.
"""
import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig
from gptviz.interp import composition, head_detector
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS
from gptviz.run.trace import trace

SHAPES = {
    "gpt2-like, 3 layers": ModelConfig(vocab_size=30, block_size=16, n_layer=3, n_head=3, n_embd=12),
    "grouped-query, wide heads": ModelConfig(vocab_size=30, block_size=16, n_layer=3, n_head=4, n_kv_head=2,
                                             n_embd=16, d_head=8, norm="rmsnorm", pos_encoding="rope", bias=False),
    "multi-query, 4 layers": ModelConfig(vocab_size=30, block_size=16, n_layer=4, n_head=2, n_kv_head=1, n_embd=8),
}


def by_hand(model):
    """W_Q, W_K, W_V (C × d_head) and W_O (d_head × C) of each (layer, head), sliced one head at a time."""
    cfg = model.config
    nh, nkv, hs = cfg.n_head, cfg.n_kv_head, cfg.d_head
    out = {}
    for layer, block in enumerate(model.transformer.h):
        w = block.attn.c_attn.weight.detach().double()
        o = block.attn.c_proj.weight.detach().double()
        for h in range(nh):
            g = h // (nh // nkv)  # the key/value head query head h reads
            q_rows = w[h * hs:(h + 1) * hs]
            k_rows = w[nh * hs + g * hs: nh * hs + (g + 1) * hs]
            v_rows = w[nh * hs + nkv * hs + g * hs: nh * hs + nkv * hs + (g + 1) * hs]
            out[layer, h] = {"Q": q_rows.T, "K": k_rows.T, "V": v_rows.T, "O": o[:, h * hs:(h + 1) * hs].T}
    return out


def tl_scores(model, mode):
    """TransformerLens's all_composition_scores, densely, pair by pair."""
    cfg = model.config
    W = by_hand(model)
    OV = {k: w["V"] @ w["O"] for k, w in W.items()}
    QK = {k: w["Q"] @ w["K"].T for k, w in W.items()}
    right = {"Q": QK, "K": {k: m.T for k, m in QK.items()}, "V": OV}[mode]
    L, H = cfg.n_layer, cfg.n_head
    out = np.zeros((L, H, L, H))
    fro = lambda m: float(torch.linalg.matrix_norm(m))
    for (l1, h1), a in OV.items():
        for (l2, h2), b in right.items():
            if l1 < l2:
                out[l1, h1, l2, h2] = fro(a @ b) / (fro(a) * fro(b))
    return out


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("mode", ["Q", "K", "V"])
def test_every_score_is_transformerlens_definition(name, mode):
    torch.manual_seed(1)
    model = GPT(SHAPES[name]).eval()
    got = composition.scores(model, mode)
    want = tl_scores(model, mode)
    assert got.shape == want.shape == (model.config.n_layer, model.config.n_head) * 2
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    L = model.config.n_layer
    for l1 in range(L):
        for l2 in range(L):
            if l1 >= l2:
                assert (got[l1, :, l2, :] == 0).all()
            else:
                assert (got[l1, :, l2, :] > 0).all()


def test_the_hand_sliced_weights_are_the_models_own():
    """The slices above, against the model's recorded steps on batch row 1 (no rotary, no biases): each head's raw
    scores are (x W_Q)(x W_K)ᵀ of the normalised input, and attention's output is Σ_h z_h W_O(h)."""
    cfg = ModelConfig(vocab_size=30, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
                      pos_encoding="none", bias=False, qkv_bias=False)
    torch.manual_seed(2)
    model = GPT(cfg).eval()
    tr = trace(model, torch.randint(0, 30, (2, 7)))
    W = by_hand(model)
    for layer in range(2):
        x = torch.as_tensor(tr[f"blocks.{layer}.ln1.hook_out"]).double()[1]  # (T, C)
        raw = torch.as_tensor(tr[f"blocks.{layer}.attn.hook_scores_raw"]).double()[1]  # (nh, T, T)
        z = torch.as_tensor(tr[f"blocks.{layer}.attn.hook_z"]).double()[1]  # (T, nh, hs)
        for h in range(4):
            w = W[layer, h]
            torch.testing.assert_close(raw[h], (x @ w["Q"]) @ (x @ w["K"]).T, rtol=1e-5, atol=1e-5)
        out = sum(z[:, h] @ W[layer, h]["O"] for h in range(4))
        torch.testing.assert_close(out, torch.as_tensor(tr[f"blocks.{layer}.hook_attn_out"]).double()[1],
                                   rtol=1e-5, atol=1e-5)


def test_on_the_induction_model_the_strongest_k_composition_is_previous_token_into_induction():
    """The shipped attention-only model: the head detector names its previous-token head (layer 0's highest score)
    and its induction heads (layer 1's heads scoring 0.4 or more: it has several) on a probe. The largest
    K-composition score of all is from that previous-token head into one of those induction heads, and for every
    induction head its strongest K-composition source is the previous-token head."""
    ind = load_checkpoint(CHECKPOINTS / "induction-heads.safetensors")
    pr = head_detector.probe(ind.model, n=32, batch=8, seed=7)
    prev = (0, int(np.argmax(pr["scores"]["previous"][0])))
    inductions = [(1, h) for h in np.flatnonzero(pr["scores"]["induction"][1] >= 0.4)]
    assert 1 <= len(inductions) < ind.config.n_head
    k = composition.scores(ind.model, "K")
    best = composition.strongest(k, top=3)
    assert best[0]["from"] == prev and best[0]["to"] in inductions
    assert best[0]["score"] == pytest.approx(k[prev + best[0]["to"]])
    assert [r["score"] for r in best] == sorted((r["score"] for r in best), reverse=True)
    for to in inductions:
        assert (0, int(np.argmax(k[0, :, to[0], to[1]]))) == prev, to


def test_a_model_the_scores_are_not_for_is_refused_with_the_reason():
    one = GPT(ModelConfig(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=8))
    with pytest.raises(ValueError, match="a one-layer model has no earlier head"):
        composition.scores(one, "K")
    with pytest.raises(ValueError, match="mode='X': choose one of Q, K, V"):
        composition.scores(GPT(SHAPES["gpt2-like, 3 layers"]), "X")
    big = ModelConfig(vocab_size=30, block_size=8, n_layer=28, n_head=16, n_embd=32)
    assert composition.n_pairs(big) == 16 * 16 * 28 * 27 // 2 == 96_768
    assert "96,768 pairs of heads" in composition.why_not(big)


def test_an_encoder_decoder_model_is_refused_in_those_words():
    for n_enc in (0, 1):  # 0: a decoder reading a fixed random source through cross-attention
        cfg = ModelConfig(vocab_size=30, block_size=8, n_layer=2, n_head=2, n_embd=8, n_enc_layer=n_enc)
        assert composition.why_not(cfg) == ("composition scores are for decoder-only models; this one also has an "
                                            "encoder and cross-attention")
    one = ModelConfig(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=8)
    assert composition.why_not(one) == ("a one-layer model has no earlier head for a later one to read: composition "
                                        "needs two layers or more")
    big = ModelConfig(vocab_size=30, block_size=8, n_layer=28, n_head=16, n_embd=32)
    assert composition.why_not(big) == ("this model has 96,768 pairs of heads in different layers, over the 20,000 "
                                        "computed at once here (it would take minutes): use "
                                        "gptviz.interp.composition.scores in a notebook")
    assert composition.why_not(SHAPES["gpt2-like, 3 layers"]) == ""


def test_the_strongest_pairs_are_ranked_ties_in_index_order_and_only_real_pairs():
    """A score array of many equal values (as a head of zeros makes): the ranking keeps equal scores in the order of
    their (earlier head, later head) index, returns 10 rows by default, and never a pair whose layers do not
    compose, however many rows are asked for."""
    L, H = 4, 8
    s = np.zeros((L, H, L, H))
    for l1 in range(L):
        for l2 in range(l1 + 1, L):
            s[l1, :, l2, :] = np.where(np.arange(H)[:, None] % 2 == 0, 0.5, 0.25) * np.ones((H, H))
    rows = composition.strongest(s)
    assert len(rows) == 10 and all(r["score"] == 0.5 for r in rows)
    keys = [r["from"] + r["to"] for r in rows]
    assert keys == sorted(keys)
    everything = composition.strongest(s, top=10_000)
    assert len(everything) == H * H * L * (L - 1) // 2 and all(r["from"][0] < r["to"][0] for r in everything)
    ranked = [r["from"] + r["to"] for r in everything]
    assert ranked[:len(ranked) // 2] == sorted(ranked[:len(ranked) // 2])  # the 0.5s in index order ...
    assert ranked[len(ranked) // 2:] == sorted(ranked[len(ranked) // 2:])  # ... then the 0.25s
