"""The Streamlit layer: the only part of gptviz that imports streamlit."""
from ..perf import tune_allocator

tune_allocator()  # a server keeps traces alive: let the allocator reuse memory (see gptviz.perf)
from .page import PAGES, Ctx, page_links, page_setup
from .widgets import (
    clear_edits_button,
    downloads,
    explain,
    head_step,
    heads_off_toggle,
    masked,
    step_heatmap,
    vector_editor,
)

__all__ = ["PAGES", "Ctx", "page_links", "page_setup", "clear_edits_button", "downloads", "explain",
           "head_step", "heads_off_toggle", "masked", "step_heatmap", "vector_editor"]
