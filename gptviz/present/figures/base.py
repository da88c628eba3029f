"""The conventions every figure shares: fonts, colour scales, axes, the layout, label widths and the figure wrapper.

The same on every chart:
- signed values: a diverging scale centred on 0 (blue below, red above, white at 0);
- probabilities: a fixed 0-to-1 scale;
- non-negative values (a norm's divisor, a loss): a sequential scale from 0;
- cells attention may not use are drawn grey and say "masked" in the hover, so they never look like 0;
- fonts large enough for a projector, axes labelled with tokens.
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import get_colorscale

from ..descriptions import NONNEGATIVE, PROBABILITY

FONT = dict(size=16)
TICK_FONT = dict(size=14)
MASK_COLOR = "#9a9a9a"
# Explicit [position, colour] lists: a figure built without validation reaches plotly.js as is, and
# plotly.js reads some scale names the other way round from Plotly for Python (and knows no "_r").
SIGNED_SCALE = get_colorscale("RdBu_r")  # blue below 0, white at 0, red above
PROB_SCALE = get_colorscale("Blues")  # white at 0, dark blue at 1
NONNEG_SCALE = get_colorscale("Viridis")
# The palettes a viewer can pick (sidebar and ``?palette=``): each maps the three scales above to its own. The
# colour-blind-safe one keeps a diverging scale for signed values (ColorBrewer's PuOr) and a sequential one for
# probabilities (ColorBrewer's YlGnBu: pale yellow at 0, dark blue at 1), both marked safe for the common colour
# blindnesses, and neither passing through the masked cells' grey (cividis does); viridis already is safe.
PALETTES = {
    "default": {"signed": SIGNED_SCALE, "probability": PROB_SCALE, "nonnegative": NONNEG_SCALE},
    "colour-blind safe": {"signed": get_colorscale("PuOr_r"), "probability": get_colorscale("YlGnBu"),
                          "nonnegative": NONNEG_SCALE},
}
PALETTE_NAMES = tuple(PALETTES)
MAX_TEXT_CELLS = 400  # numbers in cells only for small tensors
MAX_TICKS = 48
# How wide a label is, without a browser: a character of an ASCII label is about 0.62 em wide; others up to 1 em.
CHAR_EM, WIDE_EM = 0.62, 1.0


def color_args(kind: str, values: np.ndarray) -> dict:
    """Colour scale arguments for a kind of values (see the module doc)."""
    finite = values[np.isfinite(values)]
    if kind == PROBABILITY:
        return dict(colorscale=PROB_SCALE, zmin=0.0, zmax=1.0)
    if kind == NONNEGATIVE:
        top = float(finite.max()) if finite.size else 1.0
        return dict(colorscale=NONNEG_SCALE, zmin=0.0, zmax=top if top > 0 else 1.0)
    m = float(np.abs(finite).max()) if finite.size else 1.0
    m = m if m > 0 else 1.0
    return dict(colorscale=SIGNED_SCALE, zmin=-m, zmax=m, zmid=0.0)


# Plotly reads a subset of HTML in every label it draws (titles, ticks, hover text, legend names, annotations):
# ``<a href>`` is a link, ``<b>`` bold. Tokens and user text reach those labels, so ``figure`` escapes them all,
# in this one place. Keys whose strings are pure data (a token, a name) are escaped whole; the others (titles,
# hover text, templates) are escaped except for the few harmless tags the figures write themselves.
_PLAIN_KEYS = frozenset({"x", "y", "ticktext", "tickvals", "customdata", "name", "categoryarray", "labels"})
_OWN_TAGS = ("br", "/br", "br /", "b", "/b", "i", "/i", "sub", "/sub", "sup", "/sup", "extra", "/extra", "/span")
_OWN_TAG = re.compile("(<(?:" + "|".join(re.escape(t) for t in _OWN_TAGS) + r"|span style='font-size:\d+px')>)")
_BARE_AMP = re.compile(r"&(?!(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);)")


_NUMBERS = frozenset({int, float, bool, type(None), np.float64, np.float32, np.int64, np.int32, np.bool_})


def escape_label(text: str) -> str:
    """``text`` with ``<``, ``>`` and ``&`` written as entities, so Plotly shows them as characters and never reads
    them as markup. Idempotent (an entity is left as it is: Plotly shows it as its character, as text)."""
    if "<" not in text and ">" not in text and "&" not in text:
        return text
    return _BARE_AMP.sub("&amp;", text).replace("<", "&lt;").replace(">", "&gt;")


def escape_markup(text: str) -> str:
    """``text`` escaped as ``escape_label`` does, except for the figures' own harmless tags (``<br>``, ``<b>``,
    ``<extra>``, a font-size ``<span>`` …): a title or hover text built around a token keeps its line breaks,
    and the token's own ``<a href>`` stays text."""
    bare = text.replace("<br>", "").replace("<extra>", "").replace("</extra>", "")  # the usual tags: fast path
    if "<" not in bare and ">" not in bare and "&" not in bare:
        return text
    parts = _OWN_TAG.split(text)  # odd indices: the figures' own tags, kept
    return "".join(p if i % 2 else escape_label(p) for i, p in enumerate(parts))


def escape_labels(node: Any, plain: bool = False) -> Any:
    """Every string in a figure's (nested) trace or layout dicts escaped (see ``escape_label``); numbers and
    arrays as they are."""
    if isinstance(node, str):
        return escape_label(node) if plain else escape_markup(node)
    if isinstance(node, dict):
        return {k: escape_labels(v, plain or k in _PLAIN_KEYS) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        esc = escape_label if plain else escape_markup
        return [esc(v) if type(v) is str else v if type(v) in _NUMBERS else escape_labels(v, plain) for v in node]
    if isinstance(node, np.ndarray) and node.dtype == object:
        return [escape_labels(v, plain) for v in node.tolist()]
    return node


class PlainFigure(go.Figure):
    """A Plotly figure held as the plain trace and layout dicts it was built from, until something asks for more.

    Wrapping a figure in Plotly's object model, even without validation, copies every trace deeply and makes an
    object for each: about 1 ms a heatmap, and most figures are only finished and drawn (``finishing.finished``
    reads ``plain()``). The first attribute asked for that the plain dicts do not answer (``fig.layout``,
    ``fig.data``, ``update_layout``, ``to_dict``, …) builds the figure exactly as
    ``go.Figure(dict(data=..., layout=...), _validate=False)`` would, and from then on it is that figure."""

    def __init__(self, data=None, layout=None, *args, **kwargs):
        if isinstance(data, list) and isinstance(layout, dict) and not args and not kwargs:
            object.__setattr__(self, "_plain", (data, layout))
            return
        super().__init__(data, layout, *args, **kwargs)  # a copy or an unpickled figure: Plotly's own way

    def plain(self) -> tuple[list, dict] | None:
        """(traces, layout) as built, or None once Plotly's figure is made."""
        return self.__dict__.get("_plain")

    def __getattr__(self, name: str):
        plain = self.__dict__.pop("_plain", None)  # once: while Plotly builds it, a missing attribute is missing
        if plain is None:
            raise AttributeError(name)
        go.Figure.__init__(self, dict(data=plain[0], layout=plain[1]), _validate=False)
        return getattr(self, name)


def figure(data: list, layout: dict) -> go.Figure:
    """A figure from plain trace and layout dicts, every label escaped, held plain (``PlainFigure``) and made into
    Plotly's object, without validation, only if something asks for it.

    Plotly's object model costs ~15 ms per heatmap with validation and ~1 ms without, which a page of a dozen
    heatmaps cannot afford on every rerun. Tests check the result."""
    return PlainFigure(escape_labels(list(data)), escape_labels(dict(layout)))


def ticks(labels: Sequence[str]) -> dict:
    """Tick settings naming an axis's positions by ``labels``, at most ``MAX_TICKS`` of them shown."""
    n = len(labels)
    step = max(1, math.ceil(n / MAX_TICKS))
    idx = list(range(0, n, step))
    return dict(tickmode="array", tickvals=idx, ticktext=[labels[i] for i in idx], tickfont=TICK_FONT)


def axis(title: str = "", reverse: bool = False, **extra) -> dict:
    """An axis without grid or zero line; ``reverse`` puts the first row at the top."""
    ax = dict(title=dict(text=title), showgrid=False, zeroline=False, **extra)
    if reverse:
        ax["autorange"] = "reversed"
    return ax


def base_layout(title: str, height: int, **extra) -> dict:
    """The layout every chart starts from: its title, the projector fonts, small margins, a white plot."""
    return dict(title=dict(text=title, font=dict(size=18)), font=FONT, height=height,
                margin=dict(l=10, r=10, t=60, b=10), plot_bgcolor="white", **extra)


def unique_labels(labels: Sequence[str]) -> list[str]:
    """Labels made distinct (a repeated token gets its index), so each can name a category on an axis."""
    seen: dict[str, int] = {}
    out = []
    for i, lab in enumerate(labels):
        lab = str(lab)
        out.append(lab if lab not in seen else f"{lab} [{i}]")
        seen[lab] = 1
    return out


def wrap(text: str, width: int) -> str:
    """``text`` broken into lines of at most ``width`` characters at spaces (``<br>`` between lines), so two
    titles side by side never run into each other."""
    lines, cur = [], ""
    for word in text.split(" "):
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    lines.append(cur)
    return "<br>".join(lines)


def text_px(label, size: float) -> float:
    """The estimated width in pixels of ``label`` written at font ``size`` (see ``CHAR_EM``)."""
    return sum(CHAR_EM if ord(c) < 128 else WIDE_EM for c in str(label)) * size
