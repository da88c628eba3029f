"""The Streamlit layer: the only part of gptviz that imports streamlit."""
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
