"""The transcoder features' words (gptviz/interp/feature_labels.py): a snippet cut to about 30 characters around its
peak, "fires on" read from a snippet file written here by hand (each peak found in the file's tensors by the test),
labels for live and dead features, and the promoted tokens against the final LayerNorm written out (centred, times
its gain, through the unembedding) on the shipped model and transcoders."""
import numpy as np
import pytest
import safetensors.torch
import torch

from gptviz.interp import feature_labels as fl
from gptviz.interp.transcoder import load_snippets, load_transcoder, transcoder_path
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS

TEXTS = ["a", "b", " ", "\n", "<b>", "&", "Caesar", "<script>", "x"]  # each token id's text
VOCAB = [t.replace(" ", "␣").replace("\n", "↵") for t in TEXTS]  # as the page shows tokens
# layer -> feature -> its snippets, strongest first: (token ids, activation on each)
SNIPPETS = {
    0: {0: [([0, 1, 4, 5, 6], [0.0, 0.1, 0.9, 0.2, 0.0]),  # peak: "<b>"
            ([6, 2, 7], [0.3, 0.0, 0.8]),  # "<script>"
            ([4, 3, 0], [0.7, 0.1, 0.0])],  # "<b>" again: named once
        2: [([6] * 10 + [4] + [0] * 12, [0.0] * 10 + [0.5] + [0.1] * 12)]},  # long: cut on both sides
    1: {1: [([8, 3, 2], [0.0, 0.0, 0.4])]},  # the peak is a lone space
}
L, F, N_TOP, WIDTH = 2, 4, 3, 24


def write_snippets(path, snippets=SNIPPETS, n_layer=L, n_features=F):
    """A snippet file as ``save_snippets`` writes one: per layer ids, acts, peak, where, density; -1 padding."""
    tensors, F = {}, n_features
    for layer in range(n_layer):
        ids = torch.full((F, N_TOP, WIDTH), -1, dtype=torch.int32)
        acts = torch.zeros((F, N_TOP, WIDTH), dtype=torch.float16)
        peak = torch.zeros((F, N_TOP))
        for f, spans in snippets.get(layer, {}).items():
            for j, (toks, a) in enumerate(spans):
                ids[f, j, :len(toks)] = torch.tensor(toks, dtype=torch.int32)
                acts[f, j, :len(a)] = torch.tensor(a, dtype=torch.float16)
                peak[f, j] = max(a)
        tensors.update({f"L{layer}.ids": ids, f"L{layer}.acts": acts, f"L{layer}.peak": peak,
                        f"L{layer}.where": torch.zeros((F, N_TOP, 2), dtype=torch.int32),
                        f"L{layer}.density": (peak[:, 0] > 0).float() / 100})
    safetensors.torch.save_file(tensors, str(path))
    return path


def arrays(path, n_layer=L):
    """The file's snippets as the page holds them: per layer a dict of numpy arrays."""
    per_layer, _ = load_snippets(path, n_layer)
    return [{k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in d.items()} for d in per_layer]


def peaks_by_hand(path, layer, feat):
    """The token id at each live snippet's largest activation, read from the file's tensors."""
    raw = safetensors.torch.load_file(str(path))
    out = []
    for j in range(N_TOP):
        if raw[f"L{layer}.peak"][feat, j] <= 0:
            break
        n = int((raw[f"L{layer}.ids"][feat, j] >= 0).sum())
        out.append(int(raw[f"L{layer}.ids"][feat, j, int(raw[f"L{layer}.acts"][feat, j, :n].float().argmax())]))
    return out


def test_a_window_is_about_30_characters_around_its_peak_cut_with_an_ellipsis():
    ids = [6] * 10 + [4] + [0] * 12  # "Caesar" × 10, "<b>", "a" × 12
    before, peak, after = fl.window(ids, [0.0] * 10 + [1.0] + [0.5] * 12, TEXTS)
    assert peak == "<b>"
    assert after == "a" * fl.AFTER_CHARS + "…"
    assert before == "…" + ("Caesar" * 10)[-(fl.SNIPPET_CHARS - 3 - fl.AFTER_CHARS):]
    assert len(before) - 1 + len(peak) + len(after) - 1 == fl.SNIPPET_CHARS
    assert fl.window([0, 1, 5], [0.1, 0.2, 0.3], TEXTS) == ("ab", "&", "")  # short: nothing cut
    assert fl.window([1, 5, 1], [0.2, 0.2, 0.1], TEXTS) == ("", "b", "&b")  # a tie: the first
    assert fl.window([0] * 40 + [1], [1.0] + [0.0] * 40, TEXTS, chars=10, after=3) == ("", "a", "aaa…")
    assert fl.window([], [], TEXTS) is None
    assert fl.window([99], [1.0], TEXTS) == ("", "?", "")  # an id past the vocabulary


def test_fires_on_names_each_snippets_peak_token_once_strongest_first(tmp_path):
    path = write_snippets(tmp_path / "x.transcoder.snippets.safetensors")
    sn = arrays(path)
    want = list(dict.fromkeys(VOCAB[t] for t in peaks_by_hand(path, 0, 0)))
    assert want == ["<b>", "<script>"]
    assert fl.fires_on(sn[0], 0, VOCAB) == want
    assert fl.fires_on(sn[0], 0, VOCAB, n=1) == ["<b>"]
    assert fl.fires_on(sn[1], 1, VOCAB) == [VOCAB[t] for t in peaks_by_hand(path, 1, 1)] == ["␣"]
    assert fl.fires_on(sn[0], 1, VOCAB) == []  # never fires


def test_every_feature_gets_a_label_from_its_snippets_and_promoted_tokens(tmp_path):
    sn = arrays(write_snippets(tmp_path / "x.transcoder.snippets.safetensors"))
    up = [np.array([[8, 0, 1]] * F), np.array([[3, 2, 7]] * F)]
    labels = fl.feature_labels(F, VOCAB, up, sn)
    assert set(labels) == {(layer, f) for layer in range(L) for f in range(F)}
    assert labels[0, 0] == "fires on '<b>', '<script>' · promotes 'x', 'a', 'b'"
    assert labels[1, 1] == "fires on '␣' · promotes '↵', '␣', '<script>'"
    assert labels[0, 1] == "never fires on the held-out text · promotes 'x', 'a', 'b'"
    assert fl.feature_labels(F, VOCAB, up)[0, 0] == "promotes 'x', 'a', 'b'"  # no snippet file
    assert fl.label([], []) == "" and fl.label(["a\nb"], []) == "fires on 'a↵b'"


def test_snippets_are_the_strongest_windows_first_and_only_for_live_features(tmp_path):
    sn = arrays(write_snippets(tmp_path / "x.transcoder.snippets.safetensors"))
    got = fl.feature_snippets(sn, TEXTS)
    assert set(got) == {(0, 0), (0, 2), (1, 1)}
    assert got[0, 0] == [("ab", "<b>", "&Caesar"), ("Caesar ", "<script>", "")]  # two of its three
    assert fl.feature_snippets(sn, TEXTS, n=3)[0, 0][2] == ("", "<b>", "\na")
    assert got[1, 1] == [("x\n", " ", "")]
    assert got[0, 2][0][1] == "<b>" and got[0, 2][0][0].startswith("…")


@pytest.fixture(scope="module")
def model():
    return load_checkpoint(CHECKPOINTS / "shakespeare.safetensors").model.eval()


@pytest.mark.parametrize("cross", [True, False], ids=["cross-layer", "per-layer"])
def test_promoted_tokens_are_the_decoders_top_logits_through_the_final_layernorm(model, cross):
    tc = load_transcoder(transcoder_path("shakespeare", cross))
    got = fl.promoted(model, tc)
    assert len(got) == tc.n_layer and got[0].shape == (tc.n_features, fl.N_PROMOTES)
    gain = model.transformer.ln_f.weight.detach().double()
    W_U = model.lm_head.weight.detach().double()
    differ = 0
    for layer in range(tc.n_layer):
        d = tc.W_dec[layer][:, -1, :].detach().double()  # (F, d_model): each one's write to the last output it reaches
        logits = ((d - d.mean(1, keepdim=True)) * gain) @ W_U.T  # LayerNorm: centred, times its gain
        top = logits.topk(fl.N_PROMOTES, dim=1).values
        mine = logits.gather(1, torch.from_numpy(got[layer]).long())
        torch.testing.assert_close(mine, top, atol=1e-5, rtol=1e-5)  # the same tokens, in the same order
        plain = (d * gain) @ W_U.T  # the gain alone, not centred
        differ += int((plain.topk(fl.N_PROMOTES, dim=1).indices.numpy() != got[layer]).any(1).sum())
    assert differ > 0  # the centring changes some features' tokens: a version without it fails above
