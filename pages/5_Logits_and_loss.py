"""From the last residual stream to logits, probabilities and the cross-entropy loss."""
import math

import numpy as np
import pandas as pd
import streamlit as st

from gptviz.loss import uniform_loss

from gptviz import figures, views
from gptviz.ui import downloads, explain, page_setup, step_heatmap

FULL_VOCAB_LIMIT = 96

ctx = page_setup("Logits & loss", "🎯")
cfg, tr = ctx.cfg, ctx.trace()
b, T = ctx.b, ctx.n_pos
labels = ctx.labels()
vocab = ctx.vocab_labels()
st.title("Logits & loss")

logits = np.asarray(tr["hook_logits"])[b, :T]
probs = np.asarray(tr["hook_probs"])[b, :T]
y = np.asarray(tr.targets)[b, :T]
big = cfg.vocab_size > FULL_VOCAB_LIMIT
if big:
    k = st.slider("Top-k columns", 3, 40, 10, key="logits.k",
                  help="With a large vocabulary only the k most likely tokens at each position, plus each target, are shown.")
    ids = views.vocab_columns(logits, y, k)
else:
    ids = np.arange(cfg.vocab_size)
note = f" (top-{k} at any position + targets: {len(ids)} of {cfg.vocab_size:,} tokens)" if big else ""

st.subheader("Probabilities of the next token")
mp = views.vocab_matrix(probs, ids, vocab, labels, "probability")
st.plotly_chart(figures.heatmap(mp, "softmax(logits)" + note), width="stretch", key="probs")
explain(tr.info("hook_probs"))

if cfg.norm_placement == "pre":
    st.subheader("1 · The final norm")
    step_heatmap(ctx, "ln_final.hook_out", key="lf")
    explain(tr.info("ln_final.hook_out"))

st.subheader("2 · Logits: a score for every token")
ml = views.vocab_matrix(logits, ids, vocab, labels, "signed")
st.plotly_chart(figures.heatmap(ml, "logits" + note), width="stretch", key="logits")
downloads("hook_logits", np.asarray(tr["hook_logits"]), ml, key="lg")
explain(tr.info("hook_logits"))

st.subheader("3 · The target's probability, −log p, and the loss per token")
bd = tr.breakdown
valid = y != -100
tp = np.asarray(bd["target_probs"])[b, :T]
nll = np.asarray(tr["hook_loss_per_token"])[b, :T]
table = np.stack([np.where(valid, tp, np.nan), np.where(valid, nll, np.nan)], axis=1)
target_labels = [f"→ {vocab[t]}" if t >= 0 else "(none)" for t in y]
mt = views.Matrix(table[:, :1], labels, ["p(target)"], "position", "", "probability",
                  hover_rows=[f"{l} {tl}" for l, tl in zip(views.token_hover(labels), target_labels)])
c1, c2 = st.columns(2)
c1.plotly_chart(figures.heatmap(mt, "p of the true next token", show_values=True), width="stretch", key="tp")
mn = views.Matrix(table[:, 1:], labels, ["−log p"], "position", "", "nonnegative",
                  hover_rows=[f"{l} {tl}" for l, tl in zip(views.token_hover(labels), target_labels)])
c2.plotly_chart(figures.heatmap(mn, "loss per token: −log p", show_values=True), width="stretch", key="nll")
explain(tr.info("hook_loss_per_token"))

st.subheader("4 · The loss: their mean")
loss = tr.loss
ref = views.loss_check(np.asarray(tr["hook_logits"]), np.asarray(tr.targets))
uniform = uniform_loss(cfg.vocab_size)
c1, c2, c3 = st.columns(3)
c1.metric("mean of −log p", "—" if math.isnan(loss) else f"{loss:.5f}")
c2.metric("F.cross_entropy", "—" if math.isnan(ref) else f"{ref:.5f}",
          help="PyTorch's own cross_entropy on the same logits and targets, with ignore_index=-100.")
c3.metric("uniform guess ln V", f"{uniform:.5f}")
if math.isnan(loss):
    st.info("No position has a target yet: type at least two tokens.")
else:
    st.caption(f"Mean over {bd['n_valid']} positions with a target, all rows of the batch. "
               f"The two agree to {abs(loss - ref):.1e}.")
explain(tr.info("hook_loss"))

st.subheader("Top predictions at each position")
k2 = min(5, cfg.vocab_size)
top = views.top_predictions(probs, k2, vocab)
df = pd.DataFrame({"position": range(T), "token": labels, "true next": [vocab[t] if t >= 0 else "—" for t in y],
                   **{f"#{j + 1}": [f"{top[t][j][0]}  ({top[t][j][1]:.2f})" for t in range(T)] for j in range(k2)}})
st.dataframe(df, hide_index=True, width="stretch")
