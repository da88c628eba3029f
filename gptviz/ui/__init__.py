"""The Streamlit layer: the only part of gptviz that imports streamlit."""
from ..perf import tune_allocator

tune_allocator()  # a server keeps traces alive: let the allocator reuse memory (see gptviz.perf)

from ..perf import freeze_imports  # noqa: E402 - after tune_allocator()
from .nav import navigation  # noqa: E402 - after tune_allocator()
from .page import PAGES, Ctx, page_links, page_setup, show_notices  # noqa: E402 - after tune_allocator()
from .widgets import (  # noqa: E402 - after tune_allocator()
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

freeze_imports()  # after the heavy imports (see gptviz.perf)

__all__ = ["navigation", "PAGES", "Ctx", "page_links", "page_setup", "show_notices", "clear_edits_button", "downloads",
           "explain", "head_step", "heads_off_toggle", "loss_metrics", "masked", "step_heatmap", "vector_editor"]
