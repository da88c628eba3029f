"""A session's own models (trained, uploaded, loaded from the hub) are bounded in bytes (issue 33): past the budget
(GPTVIZ_SESSION_MODEL_BYTES) the least recently *used* are let go, the newest is always kept, and the next page
says which were let go. The sizes here are worked out by hand from each model's tensors, not by the app."""
import pytest
from streamlit.testing.v1 import AppTest

from gptviz import GPT, ModelConfig
from gptviz.ui import resources


def weight_bytes(n_embd: int) -> int:
    """The bytes of one test model's tensors (parameters and buffers, a tied tensor once), by hand."""
    m = GPT(ModelConfig(vocab_size=2000, block_size=16, n_layer=1, n_head=2, n_embd=n_embd))
    unique = {id(t): t for t in [*m.parameters(), *m.buffers()]}
    return sum(t.numel() * t.element_size() for t in unique.values())


def session_script():
    """Each run does what the test put in ``do``: register a model of that width, or use one, then shows the page
    notice of what the last run let go first, as every page's set-up does."""
    import streamlit as st

    from gptviz import GPT, ModelConfig
    from gptviz.ui import resources

    let_go = st.session_state.pop(resources.LET_GO, None)  # first, as page_setup does before any section
    if let_go:
        st.info("let go: " + ", ".join(let_go))
    keys = st.session_state.setdefault("keys", {})
    action = st.session_state.pop("do", None)
    if action and action[0] == "register":
        _, name, width = action
        model = GPT(ModelConfig(vocab_size=2000, block_size=16, n_layer=1, n_head=2, n_embd=width))
        keys[name] = resources.register_model(model, None, f"model {name}")
    elif action and action[0] == "use":
        assert resources.registered(keys[action[1]]) is not None
    mine = st.session_state.get(resources.OWN_MODELS, {})
    st.session_state["own"] = [name for name, key in keys.items() if key in mine]


def run(at: AppTest, *action) -> AppTest:
    at.session_state["do"] = action
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def notice(at: AppTest) -> str:
    return " ".join(str(i.value) for i in at.info)


def test_past_the_budget_the_least_recently_used_model_is_let_go_and_named(monkeypatch):
    a = weight_bytes(256)
    monkeypatch.setenv("GPTVIZ_SESSION_MODEL_BYTES", str(2 * a))  # room for exactly two models of width 256
    at = AppTest.from_function(session_script, default_timeout=60)
    run(at, "register", "A", 256)
    run(at, "register", "B", 256)
    assert at.session_state["own"] == ["A", "B"] and not at.info  # 2a is not over a budget of 2a
    run(at, "register", "C", 256)
    assert at.session_state["own"] == ["B", "C"]
    at.run()  # the next page names the model let go, once
    assert notice(at) == "let go: model A"
    at.run()
    assert not at.info
    run(at, "use", "B")  # B is now the most recently used: C goes next
    run(at, "register", "D", 256)
    assert at.session_state["own"] == ["B", "D"]
    at.run()
    assert notice(at) == "let go: model C"


def test_a_model_alone_over_the_budget_is_kept_and_every_other_let_go(monkeypatch):
    small, big = weight_bytes(256), weight_bytes(448)
    assert big > 2 * small
    monkeypatch.setenv("GPTVIZ_SESSION_MODEL_BYTES", str(2 * small))
    at = AppTest.from_function(session_script, default_timeout=60)
    run(at, "register", "A", 256)
    run(at, "register", "B", 256)
    run(at, "register", "Big", 448)
    assert at.session_state["own"] == ["Big"]
    at.run()
    assert notice(at) == "let go: model A, model B"


DEFAULT = resources.SESSION_MODEL_BYTES


@pytest.mark.parametrize("raw, want", [("", DEFAULT), ("abc", DEFAULT), ("-5", DEFAULT), ("9999999", DEFAULT),
                                       ("10000000", 10_000_000), ("64000000000", 64_000_000_000),
                                       ("64000000001", DEFAULT), (" 20000000 ", 20_000_000)])
def test_the_budget_from_the_environment_is_a_whole_number_in_its_range(monkeypatch, raw, want):
    monkeypatch.setenv("GPTVIZ_SESSION_MODEL_BYTES", raw)
    assert resources.session_model_bytes() == want


def test_a_page_names_the_models_let_go_as_text_once():
    """The real page set-up: what the last run let go is named above the page (as text: a label can hold a file's
    name), once."""
    from apphelp import page

    at = page("tokens")
    at.session_state[resources.LET_GO] = ["uploaded [x](http://evil.example).safetensors", "model B"]
    at.run()
    shown = [str(i.value) for i in at.info if "let go" in str(i.value)]
    assert len(shown) == 1 and "uploaded \\[x\\]\\(http\\:\\/\\/evil\\.example\\)\\.safetensors, model B" in shown[0]
    at.run()
    assert not [i for i in at.info if "let go" in str(i.value)]
