import pytest
import torch
import torch.nn.functional as F

from gptviz import CharBPETokenizer, encode_batch, loss_breakdown, pad_batch, stream_batch


def test_stream_batch_is_the_classic_shift():
    ids = list(range(100, 121))
    x, y = stream_batch(ids, batch_size=4, block_size=5)
    assert x.shape == y.shape == (4, 5)
    assert x[0].tolist() == [100, 101, 102, 103, 104] and y[0].tolist() == [101, 102, 103, 104, 105]
    assert x[3].tolist() == [115, 116, 117, 118, 119] and y[3, -1].item() == 120
    assert torch.equal(x.flatten()[1:], y.flatten()[:-1])
    with pytest.raises(ValueError, match="4×5\\+1 = 21 tokens are needed"):
        stream_batch(ids[:20], 4, 5)


def test_pad_batch_masks_and_ignores_padding():
    b = pad_batch([[1, 2, 3, 4], [5, 6]], pad_id=0)
    assert b.x.tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert b.y.tolist() == [[2, 3, 4, -100], [6, -100, -100, -100]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert b.lengths == [4, 2] and b.padded


def test_pad_batch_cuts_to_block_size_and_says_so():
    b = pad_batch([[1, 2, 3, 4, 5]], pad_id=0, block_size=3)
    assert b.x.tolist() == [[1, 2, 3]]
    assert "last 2 tokens were cut" in b.notices[0]
    with pytest.raises(ValueError, match="no tokens"):
        pad_batch([[], []], pad_id=0)


def test_encode_batch_reports_unknown_characters():
    tok = CharBPETokenizer(0).train(["abc "])
    b = encode_batch(tok, "ab€\nc", block_size=8)
    assert b.x.shape == (2, 2)
    assert any("'€'" in n for n in b.notices)
    with pytest.raises(ValueError, match="empty"):
        encode_batch(tok, "  \n ")
    with pytest.raises(ValueError, match="none of the text"):
        encode_batch(tok, "zzz")


def test_loss_breakdown_equals_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    y = torch.randint(0, 7, (2, 5), generator=g)
    y[1, 3:] = -100
    bd = loss_breakdown(logits, y)
    ref = F.cross_entropy(logits.view(-1, 7), y.view(-1), ignore_index=-100)
    assert bd["loss"].item() == pytest.approx(ref.item(), rel=1e-6)
    assert bd["n_valid"] == 8 and bd["uniform_loss"] == pytest.approx(1.9459101, rel=1e-6)
    p = torch.softmax(logits, -1)
    assert torch.allclose(bd["target_probs"][0], p[0].gather(-1, y[0, :, None])[:, 0])
    assert torch.allclose(bd["loss_per_token"], -bd["log_probs"])
    assert (bd["loss_per_token"][1, 3:] == 0).all() and (bd["target_probs"][1, 3:] == 1).all()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        loss_breakdown(logits, torch.full((2, 5), 9))
