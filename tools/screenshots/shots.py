"""The declared list of pictures: one shot per page of the app, in its navigation order (gptviz.ui.nav.PAGES, so a
new page gets a shot by itself), then the hero picture and the special views the documentation shows.

The page list is read from gptviz/ui/nav.py's source, not imported: importing gptviz loads torch (seconds), and
``--list`` (run by a fast test) needs only the titles and addresses."""
from __future__ import annotations

import ast
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tools.screenshots.live_class import three_students_answered

ROOT = Path(__file__).resolve().parents[2]
NAV = ROOT / "gptviz" / "ui" / "nav.py"

CHINESE = "注意力是你所需要的"  # "attention is all you need": GPT-2 splits most of these characters into two bytes
SHAKESPEARE = "checkpoint: shakespeare"  # the shipped Shakespeare GPT, as a link names it (?preset=...)


@dataclass(frozen=True)
class Shot:
    """One picture: ``name``.png of the page at ``address`` (the part after the server's root, query included).
    ``chart``: the view shows a Plotly chart, so the wait is for one too. ``act(page, browser, url)``: what to do
    on the drawn page before the picture (it waits for what it changes itself); other browser contexts it opens
    are closed after the picture. ``needs``: what the machine must have for the picture to be honest."""

    name: str
    address: str
    about: str
    chart: bool = True
    act: Optional[Callable] = field(default=None, compare=False)
    needs: tuple[str, ...] = ()


def slug(title: str) -> str:
    """A page title as a file name: "Tokens & batch" -> "tokens_and_batch", "Step-through" -> "step_through"."""
    return re.sub(r"[^a-z0-9]+", "_", title.lower().replace("&", " and ")).strip("_")


def address(url_path: str, **params: str) -> str:
    """``url_path`` with ``params`` as its query, encoded as the browser would send it."""
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    return url_path + ("?" + query if query else "")


def nav_pages() -> list[tuple]:
    """gptviz.ui.nav.PAGES: (file, title, icon, url_path, section) of every page, in the app's navigation order."""
    for node in ast.parse(NAV.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "PAGES" for t in targets) and node.value is not None:
            return [tuple(p) for p in ast.literal_eval(node.value)]
    raise RuntimeError(f"{NAV} has no literal PAGES list: tools/screenshots/shots.py reads the pages from it")


NO_CHART_FIRST = {"Lessons"}  # pages that open on no Plotly chart (lesson 1's first step: the table of merges)
# What the documentation uses a page's picture for, where it does (docs/screenshots/README.md).
USED_FOR = {"Contribution_graph": "; the docs' contribution graph: the opening model (the Shakespeare GPT) at its "
                                  "last position (17 on the default text)"}


# Pages shown on another model than the opening one, named in the link: the Experts page needs a mixture of experts.
PAGE_QUERY = {"Experts": {"preset": "checkpoint: shakespeare-moe"}}


def page_shots() -> list[Shot]:
    """One shot per page, on the app's default model (its opening model) and default text: the bare address (the
    link names another model for a page in ``PAGE_QUERY``)."""
    return [Shot(slug(title), address(url_path, **PAGE_QUERY.get(url_path, {})),
                 f"the {title} page, as it opens" + (f" on {PAGE_QUERY[url_path]['preset']}"
                                                      if url_path in PAGE_QUERY else "") + USED_FOR.get(url_path, ""),
                 chart=url_path not in NO_CHART_FIRST)
            for _, title, _, url_path, _ in nav_pages()]


def _scroll(page, px: int) -> None:
    """Scroll the page's main column down by ``px`` (the mouse over it), for a view below the first screen."""
    page.mouse.move(900, 400)
    page.mouse.wheel(0, px)
    page.wait_for_timeout(800)


def _switch_off_three(page, browser, url) -> None:
    """Select three nodes in the graph's list of selected nodes (the list's first entry selects them all: skip it),
    then scroll to the interventions' bars (the model computed as circuit-tracer's default: attention held)."""
    box = page.get_by_role("combobox", name=re.compile("Selected nodes"))
    for _ in range(3):
        box.click()
        page.get_by_role("option").nth(1).click()
        page.wait_for_timeout(1500)
    page.keyboard.press("Escape")
    page.get_by_text("the logits' change").first.wait_for(timeout=60_000)
    page.get_by_text("Switch features off").first.scroll_into_view_if_needed()
    page.mouse.move(900, 400)
    page.mouse.wheel(0, 330)
    page.wait_for_timeout(1500)


SPECIAL = [
    Shot("hero", address("Attention", preset=SHAKESPEARE, layer="0", head="2"),
         "the Attention page on the shipped Shakespeare GPT (named in the link), on its previous-token head L0 H2"),
    Shot("chinese_tokens_gpt2", address("Tokens_and_batch", preset="default", tokenizer="gpt2", text=CHINESE),
         f"the Tokens page with GPT-2's tokenizer on {CHINESE}: most characters are two byte tokens, 注… …注",
         needs=("cjk_font",)),
    Shot("chinese_attention_axes", address("Attention", preset="default", tokenizer="gpt2", text=CHINESE),
         "the Attention page for the same text, its query axis labelled the same way", needs=("cjk_font",)),
    Shot("circuits-induction", address("Circuits", preset="checkpoint: induction-heads",
                                       text="Now is the winter. Now is the winter"),
         "the Circuits page on the attention-only induction-heads model: tokens to logits, no transcoder needed"),
    Shot("circuits-intervention", address("Circuits", preset=SHAKESPEARE,
                                          text="ROMEO: But soft, what light through yonder window bre"),
         "the Circuits page's interventions on the Shakespeare GPT: three feature nodes switched off, the graph's "
         "prediction beside the model run as circuit-tracer does by default", act=_switch_off_three),
    Shot("lesson8-graph", address("Lessons", lesson="08_tracing_a_circuit", lstep="2"),
         "lesson 8's attribution graph step on the Shakespeare GPT, scrolled to the whole graph",
         act=lambda page, browser, url: _scroll(page, 260)),
    Shot("lesson8-composition", address("Lessons", lesson="08_tracing_a_circuit", lstep="7"),
         "lesson 8's K-composition step on the induction-heads model, scrolled to the map",
         act=lambda page, browser, url: _scroll(page, 300)),
    Shot("live_class_projector", address("Lessons", lesson="01_text_to_token_ids", preset="default"),
         "a live class in presenter mode, after three students answered and before Reveal",
         chart=False, act=three_students_answered),
]


def all_shots() -> list[Shot]:
    shots = page_shots() + SPECIAL
    names = [s.name for s in shots]
    assert len(names) == len(set(names)), f"two shots share a name: {names}"
    return shots
