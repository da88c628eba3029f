"""Plotly figure builders, each a pure function (arrays and labels in, a figure out), re-exported as ``figures.X``.

The modules, one kind of figure each:
- ``base``: the shared conventions (fonts, colour scales, axes, the layout, the figure wrapper);
- ``heatmaps``: a step's matrix, grids of heads, two patterns side by side, token and head grids;
- ``charts``: line and bar charts;
- ``finishing``: fixed margins and presenter mode's scaled fonts, applied to a built figure;
- ``pictures``: what is not a Plotly chart (token chips, the model's pipeline);
- ``composition``: how heads compose (Q, K, V scores, earlier heads × later heads);
- ``lens``: "who did it" (logit lens, direct logit attribution, patching);
- ``initialisation``: the Initialisation page.
"""
from .base import (
                   CHAR_EM,
                   FONT,
                   MASK_COLOR,
                   MAX_TEXT_CELLS,
                   MAX_TICKS,
                   NONNEG_SCALE,
                   PALETTE_NAMES,
                   PALETTES,
                   PROB_SCALE,
                   SIGNED_SCALE,
                   TICK_FONT,
                   WIDE_EM,
                   axis,
                   base_layout,
                   color_args,
                   escape_label,
                   escape_labels,
                   escape_markup,
                   figure,
                   text_px,
                   ticks,
                   unique_labels,
                   wrap,
)
from .charts import bar_chart, frequency_chart, line_chart
from .comparison import (
                   branch_paths,
                   branch_probs,
                   difference_heatmap,
                   head_change_bars,
                   head_change_grid,
                   pair_heatmaps,
)
from .composition import composition_heatmap
from .contribution_graph import contribution_figure
from .finishing import FinishedFigure, finish_spec, finished, fixed_margins, readable_x_labels, recolour, styled
from .heatmaps import (
                   HEAD_SHORT,
                   HIGHLIGHT,
                   cell_points,
                   head_grid,
                   heatmap,
                   outline_shapes,
                   side_by_side,
                   tiled_heatmap,
                   token_grid,
)
from .neurons import activation_histogram as activation_histogram  # the Neurons page's figures
from .neurons import activation_over_text as activation_over_text
from .neurons import logit_effect_chart as logit_effect_chart
from .neurons import snippets_html as snippets_html
from .pictures import architecture_dot, architecture_html, architecture_parts, token_chips_html
from .words import in_words

__all__ = [
    "CHAR_EM", "FONT", "HEAD_SHORT", "HIGHLIGHT", "MASK_COLOR", "MAX_TEXT_CELLS", "MAX_TICKS", "NONNEG_SCALE",
    "PROB_SCALE", "SIGNED_SCALE", "TICK_FONT", "WIDE_EM",
    "architecture_dot", "architecture_html", "architecture_parts", "axis", "bar_chart", "base_layout", "cell_points",
    "color_args", "composition_heatmap", "contribution_figure",
    "escape_label", "escape_labels", "escape_markup", "figure", "finish_spec", "finished", "FinishedFigure",
    "frequency_chart",
    "fixed_margins", "head_grid", "heatmap", "in_words", "readable_x_labels", "recolour", "line_chart", "PALETTES",
    "PALETTE_NAMES",
    "outline_shapes", "side_by_side",
    "styled", "text_px", "pair_heatmaps", "difference_heatmap", "head_change_grid", "head_change_bars", "branch_paths",
    "branch_probs", "ticks", "tiled_heatmap", "token_chips_html", "token_grid", "unique_labels", "wrap",
]
