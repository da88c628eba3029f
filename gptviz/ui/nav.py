"""The app's pages: file, title, icon, address and section, in one list.

``app.py`` builds ``st.navigation`` from it (so the home page is called "Home" and pages are grouped),
and ``page_links`` draws links to every page. The page files live in
``app_pages/``, a folder Streamlit does not auto-discover; each page's address (``url_path``) is the one the
old ``pages/`` folder gave, so links shared before still open the same page. Icons are Streamlit's Material Symbols,
which draw without colour-emoji fonts.
"""
from __future__ import annotations

import copy
import threading

import streamlit as st

from ..paths import ROOT  # the repository in a clone, gptviz/_bundled in an installed wheel

# (file, title, icon, url_path, section)
PAGES = [
    ("app_pages/home.py", "Home", ":material/home:", "", "Start"),
    ("app_pages/lessons.py", "Lessons", ":material/school:", "Lessons", "Start"),
    ("app_pages/tokens_and_batch.py", "Tokens & batch", ":material/text_fields:", "Tokens_and_batch",
     "The forward pass"),
    ("app_pages/embeddings.py", "Embeddings", ":material/scatter_plot:", "Embeddings", "The forward pass"),
    ("app_pages/attention.py", "Attention", ":material/visibility:", "Attention", "The forward pass"),
    ("app_pages/mlp_and_residual.py", "MLP & residual stream", ":material/account_tree:", "MLP_and_residual",
     "The forward pass"),
    ("app_pages/experts.py", "Experts", ":material/alt_route:", "Experts", "The forward pass"),
    ("app_pages/logits_and_loss.py", "Logits & loss", ":material/bar_chart:", "Logits_and_loss", "The forward pass"),
    ("app_pages/step_through.py", "Step-through", ":material/skip_next:", "Step_through", "The forward pass"),
    ("app_pages/who_did_it.py", "Who did it", ":material/insights:", "Who_did_it", "Explain a prediction"),
    ("app_pages/contributions.py", "Contribution graph", ":material/hub:", "Contribution_graph",
     "Explain a prediction"),
    ("app_pages/neurons.py", "Neurons", ":material/neurology:", "Neurons", "Explain a prediction"),
    ("app_pages/features.py", "SAE features", ":material/category:", "SAE_features", "Explain a prediction"),
    ("app_pages/circuits.py", "Circuits", ":material/schema:", "Circuits", "Explain a prediction"),
    ("app_pages/compare_models.py", "Compare models", ":material/compare:", "Compare_models", "Explain a prediction"),
    ("app_pages/generation.py", "Generation", ":material/edit_note:", "Generation", "Explain a prediction"),
    ("app_pages/backward.py", "Backward pass", ":material/undo:", "Backward", "Learning"),
    ("app_pages/training.py", "Training", ":material/fitness_center:", "Training", "Learning"),
    ("app_pages/initialisation.py", "Initialisation", ":material/tune:", "Initialisation", "Learning"),
    ("app_pages/model_and_weights.py", "Model & weights", ":material/inventory_2:", "Model_and_weights", "Models"),
]


def available() -> list[tuple]:
    """The pages whose files exist (a page still being written is left out)."""
    return [p for p in PAGES if (ROOT / p[0]).is_file()]


NAV_PAGES = "gptviz.nav.pages"  # a session's own st.Page objects, made on its first run
_prototypes: list | None = None  # (section, st.Page) for every page, made once per process and never run
_prototypes_lock = threading.Lock()


def _made_once() -> list:
    """Every page's ``st.Page``, made by the first session to ask: making one resolves its path on disk."""
    global _prototypes
    if _prototypes is None:
        with _prototypes_lock:
            if _prototypes is None:
                made = []
                for path, title, icon, url, section in available():
                    kw = {"default": True} if url == "" else {"url_path": url}
                    made.append((section, st.Page(str(ROOT / path), title=title, icon=icon, **kw)))
                _prototypes = made
    return _prototypes


def navigation():
    """``st.navigation`` over every page, grouped by section; returns the page to run.

    A session keeps its own ``st.Page`` objects (``NAV_PAGES``), copied on its first run from ones made once per
    process: making 20 resolves each page's path on disk, about 4 ms of every run when each run made them, and of
    every first view when each session did. They are never shared: Streamlit marks the page it returns as runnable
    on the object itself, and a session's runs come one at a time."""
    sections = st.session_state.get(NAV_PAGES)
    if not isinstance(sections, dict):
        sections = {}
        for section, page in _made_once():
            sections.setdefault(section, []).append(copy.copy(page))
        st.session_state[NAV_PAGES] = sections
    return st.navigation(sections, expanded=True)


def page_links() -> None:
    """A link to every page. (Run as a lone script, as in a test, the links are plain text.)"""
    pages = available()
    cols = st.columns(4)
    for i, (path, label, icon, _, _) in enumerate(pages):
        try:
            cols[i % 4].page_link(str(ROOT / path), label=label, icon=icon)
        except Exception:  # noqa: BLE001 - StreamlitPageNotFoundError outside the multipage app
            cols[i % 4].markdown(f"{icon} {label}")


def _session_page(path: str):
    """The session's own ``st.Page`` for the page file ``path`` (found by its address), or None (a page run alone)."""
    url = next((p[3] for p in PAGES if p[0] == path), None)
    sections = st.session_state.get(NAV_PAGES)
    if url is None or not isinstance(sections, dict):
        return None
    return next((page for pages in sections.values() for page in pages if page.url_path == url), None)


def link(path: str, label: str, icon: str | None = None) -> None:
    """One page link (plain text when the page runs alone, as in a test). Given the session's page object, Streamlit
    does not resolve the file's path on disk and look it up among the pages, as it does for a path (0.3 ms a run)."""
    try:
        st.page_link(_session_page(path) or str(ROOT / path), label=label, icon=icon)
    except Exception:  # noqa: BLE001 - StreamlitPageNotFoundError outside the multipage app
        st.markdown(f"{label} ({path})")


def decoder_only(ctx, what: str) -> bool:
    """False, with a message, for an encoder-decoder model on a page built for decoder-only models."""
    if getattr(ctx.cfg, "n_enc_layer", -1) >= 0:
        st.info(f"{what} works on decoder-only models. This one has an encoder and cross-attention: see its "
                "cross-attention on the Attention page, or pick another model in the sidebar.")
        return False
    return True
