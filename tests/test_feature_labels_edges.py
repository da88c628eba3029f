"""The edges of gptviz/interp/feature_labels.py, each written out by hand: token ids outside the vocabulary, a
snippet with no tokens before a live one, a zero-peak snippet that must not count, a peak wider than the room, a
carriage return in a token, a feature beyond the snippets' own count, a shorter cut passed through, and more
promoted tokens than d_model."""
import numpy as np

from gptviz.interp import feature_labels as fl
from gptviz.interp.transcoder import load_transcoder, transcoder_path
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS

VOCAB = ["a", "b", "c"]


def layer(F=5, top=2, width=4):
    """A snippet layer with nothing live: ids -1, activations and peaks 0."""
    return {"ids": np.full((F, top, width), -1, dtype=np.int32), "acts": np.zeros((F, top, width), dtype=np.float32),
            "peak": np.zeros((F, top), dtype=np.float32)}


def put(sn, f, j, ids, acts):
    sn["ids"][f, j, :len(ids)] = ids
    sn["acts"][f, j, :len(acts)] = acts
    sn["peak"][f, j] = max(acts) if acts else 1.0


def test_ids_outside_the_vocabulary_show_as_a_question_mark_and_id_0_as_itself():
    sn = layer()
    put(sn, 0, 0, [0, 3], [0.9, 0.1])  # peak on id 0: a real token
    put(sn, 1, 0, [1, 3], [0.1, 0.9])  # peak on id 3 = len(VOCAB): outside
    assert fl.fires_on(sn, 0, VOCAB) == ["a"] and fl.fires_on(sn, 1, VOCAB) == ["?"]
    assert fl.window([0, 3], [0.1, 0.9], VOCAB) == ("a", "?", "")
    labels = fl.feature_labels(2, VOCAB, [np.array([[0, 3], [2, 1]])])
    assert labels == {(0, 0): "promotes 'a', '?'", (0, 1): "promotes 'c', 'b'"}


def test_a_live_snippet_without_tokens_is_skipped_not_the_end():
    sn = layer()
    sn["peak"][2, 0] = 0.5  # live, but its ids are all padding
    put(sn, 2, 1, [2, 1], [0.2, 0.4])
    assert fl.fires_on(sn, 2, VOCAB) == ["b"]


def test_a_snippet_whose_peak_is_zero_does_not_count():
    sn = layer()
    put(sn, 3, 0, [0, 1], [0.3, 0.1])
    sn["ids"][3, 1, :2] = [2, 2]  # real tokens, never firing: peak 0
    assert fl.snippets(sn, 3, VOCAB) == [("", "a", "b")]


def test_a_peak_wider_than_the_room_leaves_nothing_before_it():
    texts = ["xxxxxx", "peak-token", "y"]
    assert fl.window([0, 1, 2], [0.0, 1.0, 0.0], texts, chars=5, after=1) == ("…", "peak-token", "y")


def test_a_carriage_return_is_dropped_and_a_new_line_drawn():
    assert fl.repr_token("a\r\nb") == "'a↵b'"


def test_every_feature_of_a_layer_is_read_and_a_shorter_cut_is_passed_through():
    sn = layer(F=5, top=2)
    put(sn, 4, 0, [0, 0, 0, 1], [0.1, 0.1, 0.1, 0.9])  # the last of 5 features: more features than snippets each
    got = fl.feature_snippets([sn], ["aaaa", "b"], chars=5)
    assert got == {(0, 4): [("…aaaa", "b", "")]}
    assert fl.snippets(sn, 4, ["aaaa", "b"], chars=5) == [("…aaaa", "b", "")]


def test_more_promoted_tokens_than_d_model_are_given():
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    tc = load_transcoder(transcoder_path("shakespeare", False))
    n = tc.d_model + 7  # more than d_model, fewer than the vocabulary
    out = fl.promoted(ck.model, tc, n)
    assert [a.shape for a in out] == [(tc.n_features, n)] * tc.n_layer
