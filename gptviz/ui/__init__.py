"""The Streamlit layer: the only part of gptviz that imports streamlit."""
from ..perf import tune_allocator

tune_allocator()  # a server keeps traces alive: let the allocator reuse memory (see gptviz.perf)
from .nav import navigation
from .page import PAGES, Ctx, page_links, page_setup, show_notices
from .widgets import (
    clear_edits_button,
    downloads,
    explain,
    head_step,
    heads_off_toggle,
    loss_metrics,
    masked,
    step_heatmap,
    vector_editor,
)

from ..perf import freeze_imports  # noqa: E402

freeze_imports()  # after the heavy imports (see gptviz.perf)

__all__ = ["navigation", "PAGES", "Ctx", "page_links", "page_setup", "show_notices", "clear_edits_button", "downloads", "explain",
           "head_step", "heads_off_toggle", "loss_metrics", "masked", "step_heatmap", "vector_editor"]
