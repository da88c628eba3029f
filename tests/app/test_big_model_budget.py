"""A big model's pages on a server with a small arithmetic budget (GPTVIZ_PAGE_GFLOP=40): each page reads as many
tokens as its own arithmetic allows and says why. GPT-2 small (124M) on a 156-token line: a pass over 128 tokens
costs about 32 GFLOP, so the pages read 128; the Backward page's forward and backward passes cost about 3 forward
passes, so it reads 32 (3 × 16 GFLOP at 64 is over 40); the Generation page's prompt is its last 128 tokens."""
import numpy as np
import pytest
from apphelp import PAGES, array, chart, ok, page

from gptviz.text.tokenizers import get_tokenizer

TEXT = " ".join(["the cat sat on the mat and the dog ran to the hill"] * 12)


@pytest.fixture(autouse=True)
def small_budget(monkeypatch):
    monkeypatch.setenv("GPTVIZ_PAGE_GFLOP", "40")
    assert len(get_tokenizer("gpt2").encode(TEXT)) == 156


def test_the_backward_page_counts_its_backward_pass():
    at = ok(page("backward", preset="gpt2-small", tokenizer="gpt2", text=TEXT))
    said = " ".join(c.value for c in at.caption)
    assert ("each line is cut to 32 tokens because the forward and backward passes over 64 tokens (about 3 forward "
            "passes) would cost about 48 GFLOP, over this server's budget of 40 GFLOP a text") in said
    g = array(chart(at, "∂loss/∂ L0 attention weights")["data"][0]["z"]).astype(float)
    assert g.shape[-2:] == (32, 32)
    assert np.isfinite(g[np.tril(np.ones((32, 32), dtype=bool))]).all()


def test_the_generation_page_reads_the_prompts_last_tokens_as_the_other_pages_do(monkeypatch):
    monkeypatch.setitem(PAGES, "generation", "app_pages/generation.py")
    at = page("generation", preset="gpt2-small", tokenizer="gpt2", text=TEXT)
    assert not at.exception, [e.message for e in at.exception]
    said = " ".join(c.value for c in at.caption)
    assert "The prompt's last 128 tokens are read. This model has 124M parameters: each line is cut to 128 tokens " \
           "because one pass over 256 tokens would cost about 66 GFLOP" in said


def test_the_attention_pages_probe_runs_the_rows_the_budget_allows(monkeypatch):
    """The head detector's probe is a pass of its own: at 40 GFLOP, GPT-2 small's 8 rows of 64 tokens (129 GFLOP)
    become 2 (32), and the legend says so."""
    from gptviz.ui import resources

    asked = []
    real = resources.probe_scores
    monkeypatch.setattr(resources, "probe_scores", lambda *a, **kw: asked.append(kw.get("batch")) or real(*a, **kw))
    at = ok(page("attention", preset="gpt2-small", tokenizer="gpt2", text=TEXT))
    assert asked and set(asked) == {2}
    at.session_state["det.legend"] = True  # the legend is written only while its fold is open
    at = ok(at.run())
    said = " ".join(m.value for m in at.markdown)
    assert "a run of 32 random tokens repeated twice (2 rows)" in said
    assert "(8 rows)" not in said


def test_who_did_it_counts_its_logit_lens_as_a_second_pass():
    """The lens unembeds every layer's stream at up to 128 positions through the whole vocabulary: about one more
    pass. At 40 GFLOP GPT-2 small's Who did it reads 64 tokens (2 × 16 GFLOP), where a one-pass page reads 128."""
    at = ok(page("who", preset="gpt2-small", tokenizer="gpt2", text=TEXT))
    said = " ".join(c.value for c in at.caption)
    assert ("each line is cut to 64 tokens because one pass over 128 tokens and the logit lens's unembedding (about "
            "2 passes) would cost about 65 GFLOP, over this server's budget of 40 GFLOP a text") in said
    positions = next(s for s in at.selectbox if s.label == "The prediction made at position")
    assert len(positions.options) == 64


def test_a_long_line_is_said_to_be_cut_to_what_the_big_model_reads_not_to_its_context():
    """GPT-2 small's context is 1,024 tokens; at 40 GFLOP its lines are cut to 128. The notice names the 128 as the
    cut for this big model, never as its block_size."""
    at = ok(page("home", preset="gpt2-small", tokenizer="gpt2", text=TEXT))
    said = [m.value for m in [*at.info, *at.warning, *at.caption]]
    assert any("far more than the 128 tokens a line of this big model is cut to: it was cut to its first 128 "
               "tokens." in m for m in said), said
    assert not any("block_size=128" in m for m in said)
