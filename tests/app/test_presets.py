"""Every model the sidebar offers works: each preset and each shipped checkpoint, chosen in turn in one
session as a user would, shows no error and the parameter count of a fresh model of its config."""
import re

import pytest
from apphelp import messages, ok, page

from gptviz import PRESETS, load_checkpoint
from gptviz.model.build import build_model
from gptviz.text.tokenizers import get_tokenizer
from gptviz.ui.resources import CHECKPOINTS


def shown_params(at) -> int:
    cap = [c.value for c in at.sidebar.caption if "parameters" in c.value]
    assert len(cap) == 1, cap
    return int(re.search(r"· ([\d,]+) parameters", cap[0]).group(1).replace(",", ""))


def shown_vocab(at) -> int:
    cap = [c.value for c in at.sidebar.caption if "vocab_size" in c.value][0]
    return int(re.search(r"vocab_size = ([\d,]+)", cap).group(1).replace(",", ""))


def expected(option: str, vocab: int) -> int:
    """The parameter count of a fresh model of the option's config, built here, not read from the app."""
    if option.startswith("checkpoint: "):
        cfg = load_checkpoint(CHECKPOINTS / f"{option[len('checkpoint: '):]}.safetensors").config
    else:
        cfg = PRESETS[option].replace(vocab_size=vocab)
    return sum(p.numel() for p in build_model(cfg).parameters())


def test_every_preset_and_checkpoint_in_turn():
    from gptviz.ui.page import preset_label, preset_options

    at = ok(page("home"))
    values = preset_options()
    assert at.selectbox(key="w.preset").options == [preset_label(v) for v in values]  # what the user sees
    assert (sum(v.startswith("checkpoint: ") for v in values) >= 3
            and {k for k, c in PRESETS.items() if getattr(c, 'n_enc_layer', -1) < 0} <= set(values))
    for opt in values:
        if opt == "custom":
            continue
        at = at.selectbox(key="w.preset").set_value(opt).run()
        ok(at)
        assert not at.error and not at.warning, (opt, messages(at))
        assert shown_params(at) == expected(opt, shown_vocab(at)), opt


@pytest.mark.parametrize("tokenizer,vocab", [("gpt2", 50257), ("char-bpe", None)])
def test_gpt2_small_link_shows_its_own_model(tokenizer, vocab):
    at = ok(page("home", preset="gpt2-small", tokenizer=tokenizer))
    assert not at.error and not at.warning, messages(at)
    if vocab is None:
        vocab = get_tokenizer("char-bpe", num_merges=20, lowercase=True).vocab_size
    assert shown_vocab(at) == vocab
    want = PRESETS["gpt2-small"].replace(vocab_size=vocab).num_params()
    assert shown_params(at) == want
    if tokenizer == "gpt2":
        assert want == 124_439_808
    assert any("cut to 512 tokens" in c.value for c in at.caption)  # a big model reads at most 512 tokens a line


def test_a_model_too_big_names_the_setting_not_the_text():
    at = ok(page("home", n_layer=48, n_embd=4096))
    err = " ".join(e.value for e in at.error)
    assert "over the limit" in err and "parameters" in err and "n_layer" in err
    assert "text" not in err.lower()
