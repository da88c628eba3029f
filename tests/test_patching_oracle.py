"""Activation patching (gptviz.interp.patching) against an oracle written here with torch's own forward hooks: every
cell of the three grids of a two-row batch (other answers per row), the grids ``what`` leaves out, the inputs in
every accepted form, the refusals word for word, and the helpers that choose prompts and answer tokens."""
import copy
import math

import numpy as np
import pytest
import torch

from gptviz import GPT, ModelConfig
from gptviz.interp import patching
from gptviz.interp.patching import (
    PAIRS,
    activation_patching,
    answer_options,
    default_pair,
    logit_diff,
    n_forward_needed,
    put_at,
)

CFG = ModelConfig(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8, init_std=0.4)
# two rows; the rows differ from each other and, within a row, clean and corrupt differ at one position
CLEAN = [[3, 7, 1, 9], [5, 2, 8, 4]]
CORRUPT = [[3, 6, 1, 9], [5, 2, 0, 4]]
ANSWER, WRONG = [2, 6], [5, 1]


@pytest.fixture(scope="module")
def model():
    return GPT(CFG).eval()


def _diff(logits, answer, wrong):
    """mean over rows of logit[answer] − logit[wrong] at the last position, in float64, row by row."""
    return sum(float(logits[b, -1, answer[b]].double() - logits[b, -1, wrong[b]].double())
               for b in range(logits.shape[0])) / logits.shape[0]


class Oracle:
    """Patching by hand: the model is run by plain ``model(idx)``; a value is caught with a torch forward (pre-)hook on
    a module (a block's input is the residual stream entering it, the last block's output the final stream, the input
    of ``attn.c_proj`` the heads' outputs side by side, the MLP's output the MLP's contribution), and patched by a
    second hook that returns the corrupted run's value with the clean one written in."""

    def __init__(self, model, answer, wrong):
        self.m, self.answer, self.wrong = model, answer, wrong
        self.clean_idx, self.corrupt_idx = torch.tensor(CLEAN), torch.tensor(CORRUPT)
        with torch.no_grad():
            self.clean = _diff(model(self.clean_idx)[0], answer, wrong)
            self.corrupt = _diff(model(self.corrupt_idx)[0], answer, wrong)

    def catch(self, module, pre: bool):
        got = {}
        if pre:
            h = module.register_forward_pre_hook(lambda mod, args: got.__setitem__("x", args[0].detach().clone()))
        else:
            h = module.register_forward_hook(lambda mod, args, out: got.__setitem__("x", out.detach().clone()))
        with torch.no_grad():
            self.m(self.clean_idx)
        h.remove()
        return got["x"]

    def score(self, module, pre: bool, write):
        """``write(x, clean)`` writes the clean values into x (the corrupted run's value) in place."""
        clean = self.catch(module, pre)

        def pre_hook(mod, args):
            x = args[0].clone()
            write(x, clean)
            return (x, *args[1:])

        def post_hook(mod, args, out):
            x = out.clone()
            write(x, clean)
            return x

        h = module.register_forward_pre_hook(pre_hook) if pre else module.register_forward_hook(post_hook)
        with torch.no_grad():
            patched = _diff(self.m(self.corrupt_idx)[0], self.answer, self.wrong)
        h.remove()
        return (patched - self.corrupt) / (self.clean - self.corrupt)

    def grids(self, cfg, T):
        blocks = self.m.transformer.h
        resid = np.zeros((cfg.n_layer + 1, T))
        for t in range(T):
            def at_t(x, c, t=t):
                x[:, t] = c[:, t]
            for i in range(cfg.n_layer):
                resid[i, t] = self.score(blocks[i], True, at_t)  # the stream entering block i
            resid[cfg.n_layer, t] = self.score(blocks[-1], False, at_t)  # the stream leaving the last block
        heads = np.zeros((cfg.n_layer, cfg.n_head))
        hs = cfg.n_embd // cfg.n_head
        for layer in range(cfg.n_layer):
            for h in range(cfg.n_head):
                def head_h(x, c, h=h):
                    x[..., h * hs:(h + 1) * hs] = c[..., h * hs:(h + 1) * hs]
                heads[layer, h] = self.score(blocks[layer].attn.c_proj, True, head_h)
        mlp = np.array([self.score(blocks[layer].mlp, False, lambda x, c: x.copy_(c)) for layer in range(cfg.n_layer)])
        return resid, heads, mlp


def test_every_cell_of_the_three_grids_of_a_two_row_batch_matches_patching_by_torch_forward_hooks(model):
    """Inputs as a numpy array and a list of lists, answers as lists (one per row): every grid cell, both logit
    differences (the mean over the rows), the labels, hooks and the count of forward passes."""
    r = activation_patching(model, np.array(CLEAN), CORRUPT, ANSWER, WRONG)
    o = Oracle(model, ANSWER, WRONG)
    resid, heads, mlp = o.grids(CFG, 4)
    assert r.clean_diff == pytest.approx(o.clean, abs=1e-9) and r.corrupt_diff == pytest.approx(o.corrupt, abs=1e-9)
    assert r.resid.shape == (3, 4) and r.heads.shape == (2, 2) and r.mlp.shape == (2,)
    assert np.allclose(r.resid, resid, atol=1e-5, rtol=0)
    assert np.allclose(r.heads, heads, atol=1e-5, rtol=0)
    assert np.allclose(r.mlp, mlp, atol=1e-5, rtol=0)
    assert np.abs(r.heads).max() > 1e-3 and np.abs(r.mlp).max() > 1e-3  # the cells do say something
    assert r.resid_labels == ["embeddings", "after layer 0", "after layer 1"]
    assert r.resid_hooks == ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.1.hook_resid_post"]
    assert r.n_forward == 2 + 3 * 4 + 2 * 2 + 2 == n_forward_needed(CFG, 4)


def test_a_one_dimensional_prompt_is_one_row_and_a_single_answer_id_serves_every_row(model):
    """A (T,) list is the batch of one row; one answer id for a two-row batch is that id in both rows."""
    r = activation_patching(model, CLEAN[1], CORRUPT[1], ANSWER[1], WRONG[1], what=())
    with torch.no_grad():
        want = _diff(model(torch.tensor([CLEAN[1]]))[0], [ANSWER[1]], [WRONG[1]])
    assert r.clean_diff == pytest.approx(want, abs=1e-9)
    assert r.n_forward == 2
    two = activation_patching(model, CLEAN, CORRUPT, 3, torch.tensor([4]), what=())
    with torch.no_grad():
        assert two.corrupt_diff == pytest.approx(_diff(model(torch.tensor(CORRUPT))[0], [3, 3], [4, 4]), abs=1e-9)


def test_what_picks_the_grids_and_leaves_the_others_nan(model):
    r = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, what=("mlp",))
    assert np.isnan(r.resid).all() and np.isnan(r.heads).all() and np.isfinite(r.mlp).all()
    assert r.n_forward == 2 + CFG.n_layer
    r = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, what=("resid",))
    assert np.isfinite(r.resid).all() and np.isnan(r.heads).all() and np.isnan(r.mlp).all()
    assert r.n_forward == 2 + 3 * 4
    r = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, what=("heads",))
    assert np.isnan(r.resid).all() and np.isfinite(r.heads).all() and np.isnan(r.mlp).all()
    assert r.n_forward == 2 + 2 * 2


def test_an_attention_only_model_has_an_empty_mlp_grid_and_no_mlp_passes():
    """n_forward_needed by hand: 2 + (L + 1)·T + L·H, no MLP term; the heads and stream match the hooked oracle."""
    cfg = CFG.replace(attn_only=True)
    m = GPT(cfg).eval()
    r = activation_patching(m, CLEAN, CORRUPT, ANSWER, WRONG, what=("resid", "heads", "mlp"))
    assert r.mlp.shape == (0,)
    assert r.n_forward == n_forward_needed(cfg, 4) == 2 + 3 * 4 + 2 * 2
    o = Oracle(m, ANSWER, WRONG)
    assert r.heads[1, 0] == pytest.approx(o.score(m.transformer.h[1].attn.c_proj, True,
                                                  lambda x, c: x[..., :4].copy_(c[..., :4])), abs=1e-5)


def test_the_refusals_say_exactly_what_is_wrong(model):
    with pytest.raises(ValueError) as e:
        activation_patching(model, CLEAN, [row[:-1] for row in CORRUPT], ANSWER, WRONG)
    assert str(e.value) == ("the two prompts must have the same number of tokens to be patched position by position: "
                            "the clean one has 4, the corrupted one 3")
    with pytest.raises(ValueError) as e:
        activation_patching(model, CLEAN, CORRUPT, [1, 2, 3], WRONG)
    assert str(e.value) == "answer needs one token id per row (2), not 3"
    with pytest.raises(ValueError) as e:
        activation_patching(model, CLEAN, CORRUPT, ANSWER, [])
    assert str(e.value) == "wrong needs one token id per row (2), not 0"
    with pytest.raises(ValueError) as e:
        activation_patching(model, CLEAN, CORRUPT, ANSWER, [-1, 3])
    assert str(e.value) == "the wrong token id -1 is outside the vocabulary (vocab_size=11)"
    with pytest.raises(ValueError) as e:
        activation_patching(model, CLEAN, CORRUPT, [0, 11], WRONG)
    assert str(e.value) == "the answer token id 11 is outside the vocabulary (vocab_size=11)"
    with pytest.raises(ValueError) as e:
        activation_patching(model, CLEAN, CORRUPT, [4, 4], 4)
    assert str(e.value) == ("the answer and the wrong token are the same token: their logit difference is always 0. "
                            "Choose two different tokens")
    with pytest.raises(ValueError) as e:
        activation_patching(model, CLEAN, CLEAN, ANSWER, WRONG)
    with torch.no_grad():
        d = _diff(model(torch.tensor(CLEAN))[0], ANSWER, WRONG)
    assert str(e.value) == (f"the two prompts give the same logit difference ({d:.4g}), so there is nothing to "
                            "recover: change one of the prompts or the answer tokens")


def test_the_ends_of_the_vocabulary_are_valid_answer_ids_and_one_row_may_share_its_tokens(model):
    """Ids 0 and vocab_size − 1 are accepted; the answer and wrong token may coincide in one row if not in all."""
    r = activation_patching(model, CLEAN, CORRUPT, [0, 10], [10, 10], what=())
    with torch.no_grad():
        assert r.clean_diff == pytest.approx(_diff(model(torch.tensor(CLEAN))[0], [0, 10], [10, 10]), abs=1e-9)


def test_logit_diff_reads_the_last_position_of_every_row_from_numpy_or_torch():
    lg = np.zeros((2, 3, 4), dtype=np.float32)
    lg[0, -1] = [1, 2, 3, 4]
    lg[1, -1] = [10, 20, 30, 40]
    lg[:, 0] = 99.0  # not the last position
    want = ((4 - 1) + (20 - 30)) / 2
    assert logit_diff(lg, torch.tensor([3, 1]), torch.tensor([0, 2])) == want
    assert logit_diff(torch.from_numpy(lg), torch.tensor([3, 1]), torch.tensor([0, 2])) == want


def test_logit_diff_subtracts_in_float64():
    """1e8 − 0.1 has no float32 of its own: in float32 the difference would round to 1e8."""
    lg = np.array([[[1e8, 0.1]]], dtype=np.float32)
    assert logit_diff(lg, torch.tensor([0]), torch.tensor([1])) == 1e8 - float(np.float32(0.1))
    assert logit_diff(torch.from_numpy(lg), torch.tensor([1]), torch.tensor([0])) == float(np.float32(0.1)) - 1e8


def test_put_at_writes_the_clean_values_at_one_position_or_everywhere_and_only_in_one_heads_slice():
    clean = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2)
    x = torch.full_like(clean, -1.0)
    out = put_at(1, clean)(x.clone())
    want = x.clone()
    want[:, 1] = clean[:, 1]
    assert torch.equal(out, want)
    out = put_at(None, clean, head=1)(x.clone())
    want = x.clone()
    want[:, :, 1] = clean[:, :, 1]
    assert torch.equal(out, want)
    out = put_at(2, clean, head=0)(x.clone())
    want = x.clone()
    want[:, 2, 0] = clean[:, 2, 0]
    assert torch.equal(out, want)
    assert torch.equal(put_at(None, clean)(x.clone()), clean)


def test_an_encoder_decoder_with_encoder_layer_is_refused_and_one_without_is_not():
    from gptviz.model.build import build_model

    with pytest.raises(ValueError) as e:
        activation_patching(build_model(CFG.replace(n_enc_layer=1)), CLEAN, CORRUPT, ANSWER, WRONG)
    assert str(e.value) == ("two-prompt patching here runs decoder prompts only, and this encoder-decoder model also "
                            "reads a source sequence: choose a decoder-only model")
    # n_enc_layer=0: a decoder with cross-attention to a fixed random encoder output, no source to read: patched
    r = activation_patching(build_model(CFG.replace(n_enc_layer=0)), CLEAN, CORRUPT, ANSWER, WRONG, what=("heads",))
    assert np.isfinite(r.heads).all() and r.n_forward == 2 + 2 * 2


class Chars:
    """A tokenizer of one token per character (or ``fixed`` for every text)."""

    def __init__(self, fixed=None):
        self.fixed = fixed

    def encode(self, s):
        return list(self.fixed) if self.fixed is not None else [ord(c) for c in s]


class Words:
    """One token per word (its letters' code points summed)."""

    def encode(self, s):
        return [sum(map(ord, w)) for w in s.split(" ")]


def test_default_pair_takes_the_first_pair_of_equal_lengths_that_fits_the_context():
    """By hand, one token per character: the sort pair has 12 tokens each; the general pairs 22, 22, 18, 58/58, 11, 5
    ("the cat sat"/"the rat sat" is the first with at most 11, "a cat"/"a rat" the first with at most 10)."""
    assert default_pair(Chars(), "sort") == PAIRS["sort"][0]
    assert default_pair(Chars(), "sort", max_len=12) == PAIRS["sort"][0]  # exactly the context: fits
    assert default_pair(Chars(), "sort", max_len=11) == ("the cat sat", "the rat sat")
    assert default_pair(Chars(), "", max_len=10) == ("a cat", "a rat")
    assert default_pair(Chars(), max_len=21) == ("the cat sat on the", "the dog sat on the")
    assert default_pair(Chars()) == ("the cat sat on the mat", "the rat sat on the mat")
    assert default_pair(Chars(), "no such task") == ("the cat sat on the mat", "the rat sat on the mat")
    assert default_pair(Chars(), "induction") == PAIRS["induction"][0]
    # nothing fits: the first pair (of the task) all the same
    assert default_pair(Chars(), "sort", max_len=4) == PAIRS["sort"][0]
    assert default_pair(Chars(), "", max_len=4) == PAIRS[""][0]
    # a tokenizer that cannot tell the two prompts apart: no pair qualifies
    assert default_pair(Chars(fixed=[1, 2]), "induction", max_len=3) == PAIRS["induction"][0]
    assert default_pair(Chars(fixed=[]), "sort") == PAIRS["sort"][0]
    # one token per word: the sort pair is one word each, which differ
    assert default_pair(Words(), "sort") == PAIRS["sort"][0]


def _softmax(xs):
    e = [math.exp(x - max(xs)) for x in xs]
    return [v / sum(e) for v in e]


def test_answer_options_offer_a_small_vocabulary_whole_and_a_large_one_as_both_runs_top_k():
    """Probabilities by hand (math.exp); the order most likely first after the clean prompt, ties by token id."""
    clean = [0.0, 3.0, 1.0, 2.0, 0.0, -1.0]
    corrupt = [5.0, 0.0, 0.0, 4.0, 0.0, 0.0]
    lc = torch.zeros(2, 3, 6)
    lk = torch.zeros(2, 3, 6)
    lc[0, -1], lk[0, -1] = torch.tensor(clean), torch.tensor(corrupt)
    lc[1, -1] = lk[1, -1] = torch.tensor([9.0, 0, 0, 0, 0, 0])  # another row: not read
    lc[0, 0] = lk[0, 0] = torch.tensor([0, 0, 0, 0, 0, 9.0])  # another position: not read
    pc, pk = _softmax(clean), _softmax(corrupt)
    o = answer_options(lc, lk)
    assert o.ids == [1, 3, 2, 0, 4, 5] and (o.answer, o.wrong) == (1, 0)
    assert o.p_clean == pytest.approx(dict(enumerate(pc)), abs=1e-12)
    assert o.p_corrupt == pytest.approx(dict(enumerate(pk)), abs=1e-12)
    assert answer_options(lc, lk, all_below=6).ids == [1, 3, 2, 0, 4, 5]  # 6 tokens: still whole
    o = answer_options(lc.numpy(), lk.numpy(), k=2, all_below=5)  # above: the clean top 2, then the corrupted top 2
    assert o.ids == [1, 3, 0] and set(o.p_clean) == {0, 1, 3}
    assert o.p_corrupt[0] == pytest.approx(pk[0], abs=1e-12)
    assert answer_options(lc, lk, k=3, all_below=5).ids == [1, 3, 2, 0]
    # the same favourite in both runs: the wrong token is the clean run's second
    o = answer_options(lc, lc)
    assert (o.answer, o.wrong) == (1, 3)
    # (T, vocab) and (vocab,) logits: the last position; one token only: it is both
    assert answer_options(lc[0], lk[0]).ids[:2] == [1, 3]
    assert answer_options(torch.tensor(clean), torch.tensor(corrupt)).answer == 1
    one = answer_options(torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))
    assert (one.ids, one.answer, one.wrong) == ([0], 0, 0)


def test_the_default_k_and_vocabulary_limit_are_thirty_tokens_and_512():
    v = 600
    lc = torch.arange(v, dtype=torch.float32)  # the clean run likes high ids
    lk = -torch.arange(v, dtype=torch.float32)  # the corrupted one low ids
    o = answer_options(lc, lk)
    assert o.ids == list(range(v - 1, v - 31, -1)) + list(range(30))
    assert len(answer_options(lc[:512], lk[:512]).ids) == 512
    assert len(answer_options(lc[:513], lk[:513]).ids) == 60


def test_a_patcher_scores_any_edit_against_the_two_runs(model):
    """score = (diff − corrupt) / (clean − corrupt), the oracle's numbers; diff of no edit is the corrupted run's."""
    p = patching.Patcher(model, CLEAN, CORRUPT, ANSWER, WRONG)
    o = Oracle(copy.deepcopy(model), ANSWER, WRONG)
    assert p.diff(None) == pytest.approx(o.corrupt, abs=1e-9)
    assert p.n_forward == 3
    blocks = o.m.transformer.h

    def pos2(x, c):
        x[:, 2] = c[:, 2]

    want = o.score(blocks[1], True, pos2)
    assert p.score({"blocks.1.hook_resid_pre": put_at(2, p.clean_value("blocks.1.hook_resid_pre"))}) == pytest.approx(
        want, abs=1e-5)


def test_answer_options_break_ties_by_token_id_and_a_two_token_vocabulary_offers_the_other_token():
    """Ties in order of token id (a sort that is not stable reorders them from about 30 tokens on): expected lists
    written out by hand."""
    lc, lk = torch.zeros(40), torch.zeros(40)
    lc[::3] = 1.0  # 0, 3, 6, … tie at the top, the rest tie below
    lk[1::4] = 1.0  # 1, 5, 9, …
    o = answer_options(lc, lk)
    assert o.ids == list(range(0, 40, 3)) + [i for i in range(40) if i % 3]
    assert (o.answer, o.wrong) == (0, 1)
    o = answer_options(lc, lk, k=5, all_below=10)
    assert o.ids == [0, 3, 6, 9, 12, 1, 5, 13, 17]
    o = answer_options(torch.tensor([1.0, 0.0]), torch.tensor([2.0, 0.0]))  # the same favourite, two tokens
    assert (o.answer, o.wrong) == (0, 1)


def test_logits_may_come_as_bfloat16_tensors_or_a_list_of_row_tensors():
    """bfloat16 has no numpy form; a list of tensors has no torch form but a numpy one. The values by hand."""
    rows = [torch.tensor([[9.0, 0.0, 0.0], [0.0, 2.0, 1.0]]), torch.tensor([[0.0, 9.0, 0.0], [5.0, 0.0, 0.0]])]
    assert logit_diff(rows, torch.tensor([1, 0]), torch.tensor([2, 1])) == ((2.0 - 1.0) + (5.0 - 0.0)) / 2
    lg = torch.stack(rows).bfloat16()
    assert logit_diff(lg, torch.tensor([1, 0]), torch.tensor([2, 1])) == ((2.0 - 1.0) + (5.0 - 0.0)) / 2
    o = answer_options(lg, lg.flip(0))
    assert o.ids[:1] == [1] and o.answer == 1 and o.wrong == 0
    last = [torch.tensor([[9.0, 0.0, 0.0], [0.0, 3.0, 1.0]]), torch.tensor([[0.0, 0.0, 9.0], [0.0, 0.0, 0.0]])]
    o = answer_options(last, last)  # (B=2, T=2, 3) as a list of rows: row 0's last position
    assert o.ids == [1, 2, 0] and o.p_clean == pytest.approx(dict(enumerate(_softmax([0.0, 3.0, 1.0]))), abs=1e-12)


def test_prompts_may_come_as_a_list_of_row_tensors(model):
    r = activation_patching(model, [torch.tensor(row) for row in CLEAN], [torch.tensor(row) for row in CORRUPT],
                            ANSWER, WRONG, what=())
    with torch.no_grad():
        assert r.clean_diff == pytest.approx(_diff(model(torch.tensor(CLEAN))[0], ANSWER, WRONG), abs=1e-9)
