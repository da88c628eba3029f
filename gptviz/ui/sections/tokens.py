"""The Tokens & batch page's sections: the B×T grids of x and y, the tokens as chips, editing token ids,
padding and the attention mask, and the BPE merges."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import streamlit as st

from ...present import figures
from ...text.batches import READ_OTHER_SCRIPTS
from ...text.tokenizers import SPLIT_MARK
from ..widgets import plot
from . import section
from .steps import mark_cell


def _labels(ctx) -> list[list[str]]:
    """Every row's labels: its real tokens read in context (a character split over byte tokens shows as 注… …注),
    then the padding's."""
    b = ctx.batch
    return [ctx.labels(r) + [ctx.id_label(i) for i in row[b.lengths[r]:]] for r, row in enumerate(b.x.tolist())]


@section("tokens.grids")
def grids(ctx, *, key: str = "grid", highlight: Optional[dict] = None) -> bool:
    """x and y as B×T grids of tokens and ids. ``highlight`` {"row", "col"} outlines one target cell of y."""
    b = ctx.batch
    B, T = b.x.shape
    xlabels = _labels(ctx)
    plot(ctx, figures.token_grid(xlabels, b.x.numpy(), b.attention_mask.numpy(),
                                 f"x: the input ids, B={B} × T={T}"), key=f"{key}.x")
    xs = b.x.tolist()
    # a target is the next input token: label it as that token is labelled in context (注… …注), else by its id
    ylabels = [[xlabels[r][t + 1] if i >= 0 and t + 1 < len(xs[r]) and xs[r][t + 1] == i else
                ctx.id_label(i) if i >= 0 else "" for t, i in enumerate(row)] for r, row in enumerate(b.y.tolist())]
    fig = figures.token_grid(ylabels, b.y.numpy(), b.attention_mask.numpy(),
                             "y: the targets, x shifted left by one (— = nothing to predict)")
    marked = bool(highlight and "row" in highlight and "col" in highlight)
    if marked:
        mark_cell(fig, highlight["row"], highlight["col"])
    plot(ctx, fig, key=f"{key}.y")
    st.markdown(
        "Each row is one line of your text. The target at position *t* is the token at *t + 1*: the model reads "
        "`x[:, :t+1]` and must guess `y[:, t]`. The last real position has no next token, so its target is "
        "`-100`, which the loss ignores."
    )
    return marked


@section("tokens.chips")
def chips(ctx, *, key: str = "chips", highlight: Optional[dict] = None) -> bool:
    """Every row's tokens as coloured chips with their ids. ``highlight`` {"count"} states the token count."""
    b = ctx.batch
    labels = _labels(ctx)
    for r in range(b.x.shape[0]):
        st.markdown(figures.token_chips_html(labels[r], b.x[r].tolist(), pad_from=b.lengths[r]), unsafe_allow_html=True)
        st.write("")
    tok = ctx.tok
    unknown = left_out(ctx)
    if unknown:
        st.markdown(figures.token_chips_html(unknown, [None] * len(unknown), unknown=True), unsafe_allow_html=True)
        st.caption("Left out: these characters are not in this tokenizer's vocabulary, so the model never sees them. "
                   + OTHER_SCRIPTS)
    split = any(lab.startswith(SPLIT_MARK) or lab.endswith(SPLIT_MARK) for row in labels for lab in row)
    st.caption(f"Tokenizer: **{tok.name}** · vocabulary of {tok.vocab_size:,} tokens · end-of-text id {tok.eot_id}. "
               "␣ is a space, ↵ a new line."
               + (f" {SPLIT_MARK} marks a character split over several tokens: this tokenizer reads bytes, and a "
                  "character such as 注 is three bytes in UTF-8." if split else ""))
    if highlight and "count" in highlight:
        st.success(f"Row {ctx.b} is **{highlight['count']} tokens** long.")
        return True
    return False


OTHER_SCRIPTS = READ_OTHER_SCRIPTS + " in the sidebar."
MAX_LEFT_OUT_SHOWN = 40


def left_out(ctx) -> list[str]:
    """The characters of the text that the tokenizer has no token for (the char BPE's unknown characters), at most
    ``MAX_LEFT_OUT_SHOWN``."""
    unknown_of = getattr(ctx.tok, "unknown_chars", None)
    text = ctx.s.get("text")
    if unknown_of is None or not isinstance(text, str):
        return []
    return unknown_of(text)[:MAX_LEFT_OUT_SHOWN]


@section("tokens.edit_ids")
def edit_ids(ctx, *, key: str = "tok") -> None:
    """Change any token id; every page is recomputed for the new token."""
    b, tok = ctx.batch, ctx.tok
    B = b.x.shape[0]
    st.markdown("Change an id and every later page is recomputed for the new token.")
    row = st.selectbox("Row", list(range(B)), index=ctx.b, key=f"{key}.row") if B > 1 else 0
    ids = b.x[row, : b.lengths[row]].tolist()
    df = pd.DataFrame({"position": range(len(ids)), "token": [ctx.id_label(i) for i in ids], "id": ids})
    gen = ctx.s.get("edit_gen", 0)
    edited = st.data_editor(df, key=f"{key}.ids.{row}.{gen}", hide_index=True, disabled=["position", "token"],
                            column_config={"id": st.column_config.NumberColumn(
                                "id", min_value=0, max_value=tok.vocab_size - 1, step=1, required=True)})
    changed = {f"{row},{t}": int(v) for t, (v, old) in enumerate(zip(edited["id"].tolist(), ids))
               if pd.notna(v) and int(v) != old}
    if changed:
        ctx.s.setdefault("id_edits", {}).update(changed)
        st.rerun()
    if ctx.s.get("id_edits"):
        st.caption(f"{len(ctx.s['id_edits'])} token id edit(s) active.")
        if st.button("Undo token edits", key=f"{key}.undo"):
            ctx.s["id_edits"] = {}
            ctx.s["edit_gen"] = gen + 1
            st.rerun()


@section("tokens.padding")
def padding(ctx, *, key: str = "pad") -> None:
    """Padding and the attention mask, when the lines have different lengths."""
    b, tok = ctx.batch, ctx.tok
    T = b.x.shape[1]
    if not b.padded:
        st.caption("Every line has the same length, so nothing is padded: the attention mask is all ones.")
        return
    st.subheader("Padding and the attention mask")
    st.markdown(
        f"The lines have different lengths ({', '.join(map(str, b.lengths))} tokens), so the shorter ones are padded "
        f"with the end-of-text id {tok.eot_id} up to T={T}. The **attention mask** is 1 for a real token and 0 for "
        "padding: attention never looks at a padded key, and the loss ignores padded targets."
    )
    st.dataframe(pd.DataFrame(b.attention_mask.numpy(), columns=[str(t) for t in range(T)]).rename_axis("row"),
                 width="stretch", key=f"{key}.mask")


@section("tokens.merges")
def merges(ctx, *, key: str = "merges") -> None:
    """The char BPE tokenizer's merges, in the order it learned them."""
    tok = ctx.tok
    if tok.name != "char-bpe":
        st.caption(f"The {tok.name} tokenizer's merges were learned elsewhere on a huge corpus; pick the char BPE "
                "tokenizer to see every merge.")
        return
    st.subheader(f"The {len(tok.merges)} learned merges, in order")
    st.markdown("Training starts from single characters and repeatedly merges the most frequent neighbouring "
                "pair of the built-in text into one new token.")
    table = pd.DataFrame([{"rank": i, "left": a, "right": c, "new token": a + c, "id": tok.vocab[a + c]}
                          for i, (a, c) in enumerate(tok.merges)])
    if len(table):
        table[["left", "right", "new token"]] = table[["left", "right", "new token"]].map(
            lambda s_: s_.replace(" ", "␣").replace("\n", "↵"))
        st.dataframe(table, hide_index=True, width="stretch", height=min(420, 38 + 35 * len(table)),
                     key=f"{key}.table")
    else:
        st.info("With 0 merges every token is a single character.")
