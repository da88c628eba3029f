"""Generation: the next-token distribution, how temperature, top-k and top-p reshape it, token by token."""
import numpy as np
import streamlit as st
import torch

from gptviz import figures, trace, views
from gptviz.generate import distribution, generate, next_token_logits
from gptviz.ui import page_setup

SHOW = 12  # bars per chart

ctx = page_setup("Generation", "✍️")
tok, model = ctx.tok, ctx.model
vocab = ctx.vocab_labels()
st.title("Generation")

prompt = st.text_input("Prompt", value=ctx.s["text"].splitlines()[0] if ctx.s["text"].strip() else "the", key="gen.prompt")
c1, c2, c3 = st.columns(3)
temperature = c1.slider("Temperature", 0.0, 2.0, 1.0, 0.05, key="gen.temp",
                        help="Divides the logits: below 1 sharpens the distribution, above 1 flattens it, 0 is greedy.")
top_k = c2.number_input("Top-k (0 = off)", 0, tok.vocab_size, 0, key="gen.topk",
                        help="Keep only the k most likely tokens.")
top_p = c3.slider("Top-p (1 = off)", 0.05, 1.0, 1.0, 0.05, key="gen.topp",
                  help="Keep the smallest set of most likely tokens whose probability adds up to p.")

ids = tok.encode(prompt)
if not ids:
    st.warning("The prompt has no tokens this tokenizer knows: type something else.")
    st.stop()
ids = ids[-model.config.block_size:]
g = st.session_state.get("gptviz.gen")
shown = ids + (g["tokens"] if g and g["ids"] == ids else [])
shown = shown[-model.config.block_size:]
tr = trace(model, torch.tensor([shown])).numpy()
L, H = ctx.layer, ctx.head or 0
name = f"blocks.{L}.attn.hook_pattern"
m = views.step_matrix(tr[name], tr.info(name), [vocab[i] for i in shown], 0, H, masked=views.masked_cells(tr, 0))
st.plotly_chart(figures.heatmap(m, f"What each token looks at: layer {L} head {H}"
                                + (" (prompt + generated)" if len(shown) > len(ids) else " (prompt)"), height=340),
                width="stretch", key="gen.pattern")
logits = next_token_logits(model, ids)
d = distribution(logits, temperature, top_k or None, top_p)
order = torch.argsort(d.raw, descending=True, stable=True)[:SHOW].tolist()
labels = [vocab[i] for i in order]
st.subheader(f"What comes after “{prompt[-40:]}”?")
st.plotly_chart(figures.bar_chart(labels, d.final[order].tolist(), title="The distribution a token is drawn from",
                                  x_title="probability", prob=True, highlight=0 if float(d.final[order[0]]) > 0 else None),
                width="stretch", key="gen.final")
stages = [("softmax(logits)", d.raw), (f"÷ temperature {temperature:g}", d.tempered),
          (f"top-k {top_k or 'off'}", d.after_top_k), (f"top-p {top_p:g}", d.final)]
cols = st.columns(4)
for c, (title, p) in zip(cols, stages):
    c.plotly_chart(figures.bar_chart(labels, p[order].tolist(), title=title, prob=True), width="stretch", key=f"gen.{title}")
kept = int(d.kept.sum())
st.caption(f"{kept:,} of {tok.vocab_size:,} tokens can still be drawn. Bars show the {SHOW} most likely tokens "
           "before any reshaping; a bar at 0 has been cut.")

st.subheader("Generate token by token")
c1, c2, c3 = st.columns(3)
mode = c1.radio("Choice", ["greedy", "sampled"], horizontal=True, key="gen.mode")
n = c2.slider("Tokens", 1, 50, 12, key="gen.n")
seed = c3.number_input("Seed", 0, 2**31 - 1, 0, key="gen.seed")
if st.button("Generate", type="primary", key="gen.go"):
    steps = generate(model, ids, int(n), temperature, top_k or None, top_p, greedy=mode == "greedy", seed=int(seed))
    st.session_state["gptviz.gen"] = {"prompt": prompt, "ids": ids, "tokens": [s_.token for s_ in steps],
                                      "dists": [s_.dist.final.numpy() for s_ in steps], "mode": mode}
g = st.session_state.get("gptviz.gen")
if g and g["ids"] != ids:
    g = None  # generated from another prompt
if g:
    toks = g["tokens"]
    st.markdown(figures.token_chips_html([vocab[i] for i in g["ids"]] + [vocab[i] for i in toks], g["ids"] + toks,
                                         pad_from=None), unsafe_allow_html=True)
    st.markdown(f"**Text:** {tok.decode(g['ids'] + toks)!r}")
    k = st.slider("Step", 1, len(toks), 1, key="gen.step") - 1
    p = np.asarray(g["dists"][k])
    top = np.argsort(-p, kind="stable")[:SHOW]
    chosen = int(toks[k])
    if chosen not in top:
        top = np.append(top[:-1], chosen)
    lab = [vocab[i] for i in top]
    st.plotly_chart(figures.bar_chart(lab, p[top].tolist(), title=f"Step {k + 1}: drew “{vocab[chosen]}” (red)",
                                      prob=True, highlight=int(np.where(top == chosen)[0][0])),
                    width="stretch", key="gen.stepchart")
