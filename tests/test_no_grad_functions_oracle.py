"""The nine functions of gptviz.interp that open a ``torch.no_grad()`` block in their body (until commit af40cf8
they were decorated, and mutmut skips decorated functions): the cases their other oracle tests leave open, each
checked against an independent computation written out here or in the oracle helpers these tests import
(``Contributions.compute``: the float64 rule of tests/test_contributions_graph.py, itself torch's
``pairwise_distance`` on the recorded values)."""
import numpy as np
import pytest
import torch
from test_contributions_graph import EXACT, PAR, SEQ, _assert_arrays, _exact, _setup
from test_contributions_graph import T as N_POS
from test_head_detector_oracle import KINDS, _probe_by_hand
from test_neurons_oracle import hooked, tiny_model

from gptviz import GPT, ModelConfig
from gptviz.interp import contributions as contrib
from gptviz.interp import head_detector as hd
from gptviz.interp import neurons
from gptviz.interp.contributions import Contributions
from gptviz.interp.sae import SparseAutoencoder


# --------------------------------------------------------------------------- Contributions.compute
@pytest.mark.parametrize("name", [SEQ, PAR])
@pytest.mark.parametrize("per_chunk", [1, 2, 3, N_POS])
@torch.no_grad()
def test_compute_asked_out_of_order_in_chunks_gives_every_row_its_exact_shares_once(name, per_chunk, monkeypatch):
    """Positions asked unsorted, repeated and across calls, ``CHUNK_ELEMENTS`` set so that ``per_chunk`` queries of
    the last asked position's width fit one chunk: every share of row 1 is the float64 rule's, each row computed
    once."""
    m, tr = _setup(name)
    cfg = m.config
    want = _exact(m, tr, 1)
    c = Contributions(m, tr, 1)
    monkeypatch.setattr(contrib, "CHUNK_ELEMENTS", per_chunk * N_POS * cfg.n_head * cfg.n_embd)
    c.compute(1, [9, 3, 3, 0])
    assert c.rows_computed == 3
    assert sorted(k[1] for k in c._attn_skip if k[0] == 1) == [0, 3, 9]
    c.compute(1, np.array([3, 9]))  # nothing new
    assert c.rows_computed == 3
    c.compute(1, range(N_POS))
    c.compute(0, reversed(range(N_POS)))
    assert c.rows_computed == 2 * N_POS
    _assert_arrays(c.arrays(), want, N_POS, EXACT)
    assert c.rows_computed == 2 * N_POS



@pytest.mark.parametrize("per_chunk", [1, 2, 3])
@torch.no_grad()
def test_compute_holds_at_most_chunk_elements_and_fills_each_chunk_with_as_many_queries_as_fit(per_chunk, monkeypatch):
    """The memory bound: each block of (queries x keys x heads x d_model) differences holds at most ``CHUNK_ELEMENTS``
    numbers, the chunk being the largest number of queries of the widest asked query's width that fits (the limit
    exactly reached, and one element short of one more query); by hand, the sorted positions cut into runs of that
    many, each run's keys up to its last query."""
    m, tr = _setup(SEQ)
    H, C = m.config.n_head, m.config.n_embd
    blocks = []
    real_norm = contrib._norm

    def norm(scores, total):
        if scores[0].dim() == 3:  # attention's (queries, keys, heads) scores, one call per chunk
            blocks.append(tuple(scores[0].shape))
        return real_norm(scores, total)

    monkeypatch.setattr(contrib, "_norm", norm)
    for asked in ([7, 0, 2, 5, 6], list(range(N_POS))):
        width = (max(asked) + 1) * H * C  # one query's block, keys up to the widest asked query
        for limit in (per_chunk * width, (per_chunk + 1) * width - 1):  # exactly full; one element short of one more
            blocks.clear()
            monkeypatch.setattr(contrib, "CHUNK_ELEMENTS", limit)
            Contributions(m, tr, 1).compute(1, asked)
            todo = sorted(asked)
            runs = [todo[i:i + per_chunk] for i in range(0, len(todo), per_chunk)]
            assert blocks == [(len(r), r[-1] + 1, H) for r in runs]
            assert all(q * k * H * C <= limit for q, k, _ in blocks)

# --------------------------------------------------------------------------- neurons.collect
@pytest.mark.parametrize("dtype", [np.uint16, np.uint8, np.int64])
def test_collect_reads_windows_of_any_integer_dtype_as_token_ids(dtype):
    """Token ids stored as uint16 (nanoGPT's token files) or uint8 (the embedding takes neither) give the same
    activations as the plain forward pre-hook on c_proj fed the ids as int64, row 1 of a two-pass read included."""
    model = tiny_model()
    windows = np.random.default_rng(3).integers(0, 20, size=(3, 5)).astype(dtype)
    got = neurons.collect(model, windows, rows_per_pass=2)
    assert got.shape == (2, 15, 32)
    np.testing.assert_allclose(got, hooked(model, windows.astype(np.int64)), rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- SparseAutoencoder.normalise_decoder
def test_normalise_decoder_gives_rows_far_shorter_than_one_unit_norm_too():
    """Oracle: each row over its own norm, whatever its length: rows of norm 1e-6, 0.3 and 40 all come out of unit
    norm (only an all-zero row is left at zero); the encoder and the biases are left as they were."""
    sae = SparseAutoencoder(4, 3, "blocks.0.hook_resid_pre", "relu", None)
    W = torch.tensor([[1e-6, -2e-6, 0.0, 2e-6], [0.3, 0.0, 0.0, 0.0], [24.0, 0.0, -32.0, 0.0]])
    with torch.no_grad():
        sae.W_dec.copy_(W)
        sae.W_enc.copy_(torch.arange(12.0).view(4, 3))
    sae.normalise_decoder()
    want = torch.tensor([[1 / 3, -2 / 3, 0.0, 2 / 3], [1.0, 0.0, 0.0, 0.0], [0.6, 0.0, -0.8, 0.0]])
    torch.testing.assert_close(sae.W_dec.detach(), want, rtol=0, atol=1e-6)
    assert torch.equal(sae.W_enc.detach(), torch.arange(12.0).view(4, 3)) and not sae.b_dec.detach().any()


# --------------------------------------------------------------------------- head_detector.probe
def test_the_probe_repeats_32_tokens_by_default_when_the_context_holds_more_than_64():
    """block_size 70 (room for 35 twice): the default run is 32 tokens, 8 rows, seed 0; the scores and both losses
    are the hand-computed ones on ``repeated_probe(vocab, 32, 8, 0)`` (the definitions on the model's own patterns,
    cross-entropy written with torch.nn.functional)."""
    m = GPT(ModelConfig(vocab_size=40, block_size=70, n_layer=2, n_head=2, n_embd=8))
    out = hd.probe(m)
    assert (out["n"], out["batch"]) == (32, 8)
    scores, first, second = _probe_by_hand(m, hd.repeated_probe(40, 32, 8, 0), 32)
    for k in KINDS:
        np.testing.assert_allclose(out["scores"][k], scores[k], rtol=0, atol=1e-6, err_msg=k)
    assert out["loss_first"] == pytest.approx(first, abs=1e-5)
    assert out["loss_second"] == pytest.approx(second, abs=1e-5)
