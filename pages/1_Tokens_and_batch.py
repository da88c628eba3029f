"""Tokens & batch: how text becomes the (B, T) grid of ids the model reads."""
import pandas as pd
import streamlit as st

from gptviz import figures
from gptviz.ui import page_setup

ctx = page_setup("Tokens & batch", "🔤")
b = ctx.batch
B, T = b.x.shape
st.title("Tokens & batch")
labels = [[ctx.id_label(i) for i in row] for row in b.x.tolist()]
st.plotly_chart(figures.token_grid(labels, b.x.numpy(), b.attention_mask.numpy(), f"x: the input ids, B={B} × T={T}"),
                width="stretch", key="grid.x")
ylabels = [[ctx.id_label(i) if i >= 0 else "" for i in row] for row in b.y.tolist()]
st.plotly_chart(figures.token_grid(ylabels, b.y.numpy(), b.attention_mask.numpy(),
                                   "y: the targets, x shifted left by one (— = nothing to predict)"),
                width="stretch", key="grid.y")
st.markdown(
    "Each row is one line of your text. The target at position *t* is the token at *t + 1*: the model reads "
    "`x[:, :t+1]` and must guess `y[:, t]`. The last real position has no next token, so its target is "
    "`-100`, which the loss ignores."
)

st.subheader("Tokens")
for r in range(B):
    st.markdown(figures.token_chips_html(labels[r], b.x[r].tolist(), pad_from=b.lengths[r]), unsafe_allow_html=True)
    st.write("")
tok = ctx.tok
st.caption(f"Tokenizer: **{tok.name}** · vocabulary of {tok.vocab_size:,} tokens · end-of-text id {tok.eot_id}. "
           "␣ is a space, ↵ a new line.")

st.subheader("Edit the token ids")
st.markdown("Change an id and every later page is recomputed for the new token.")
row = st.selectbox("Row", list(range(B)), index=ctx.b, key="tok.row") if B > 1 else 0
ids = b.x[row, : b.lengths[row]].tolist()
df = pd.DataFrame({"position": range(len(ids)), "token": [ctx.id_label(i) for i in ids], "id": ids})
gen = ctx.s.get("edit_gen", 0)
edited = st.data_editor(df, key=f"tok.ids.{row}.{gen}", hide_index=True, disabled=["position", "token"],
                        column_config={"id": st.column_config.NumberColumn("id", min_value=0, max_value=tok.vocab_size - 1,
                                                                           step=1, required=True)})
changed = {f"{row},{t}": int(v) for t, (v, old) in enumerate(zip(edited["id"].tolist(), ids))
           if pd.notna(v) and int(v) != old}
if changed:
    ctx.s.setdefault("id_edits", {}).update(changed)
    st.rerun()
if ctx.s.get("id_edits"):
    st.caption(f"{len(ctx.s['id_edits'])} token id edit(s) active.")
    if st.button("Undo token edits"):
        ctx.s["id_edits"] = {}
        ctx.s["edit_gen"] = gen + 1
        st.rerun()

if b.padded:
    st.subheader("Padding and the attention mask")
    st.markdown(
        f"The lines have different lengths ({', '.join(map(str, b.lengths))} tokens), so the shorter ones are padded "
        f"with the end-of-text id {tok.eot_id} up to T={T}. The **attention mask** is 1 for a real token and 0 for "
        "padding: attention never looks at a padded key, and the loss ignores padded targets."
    )
    st.dataframe(pd.DataFrame(b.attention_mask.numpy(), columns=[str(t) for t in range(T)]).rename_axis("row"),
                 width="stretch")

if tok.name == "char-bpe":
    st.subheader(f"The {len(tok.merges)} learned merges, in order")
    st.markdown("Training starts from single characters and repeatedly merges the most frequent neighbouring "
                "pair of the built-in text into one new token.")
    merges = pd.DataFrame([{"rank": i, "left": a, "right": c, "new token": a + c, "id": tok.vocab[a + c]}
                           for i, (a, c) in enumerate(tok.merges)])
    if len(merges):
        merges[["left", "right", "new token"]] = merges[["left", "right", "new token"]].map(
            lambda s_: s_.replace(" ", "␣").replace("\n", "↵"))
        st.dataframe(merges, hide_index=True, width="stretch", height=min(420, 38 + 35 * len(merges)))
    else:
        st.info("With 0 merges every token is a single character.")
