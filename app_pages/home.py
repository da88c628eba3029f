"""gptviz: home page."""
import pandas as pd
import streamlit as st

from gptviz.present import figures
from gptviz.ui import loss_metrics, page_links, page_setup, step_heatmap
from gptviz.ui.sections import get

ctx = page_setup("Home", ":material/home:")
tr = ctx.trace()
cfg = ctx.cfg

st.title("gptviz: watch a small GPT work")
left, right = st.columns([2, 3])
with left:
    st.markdown(
        "Type a sentence in the sidebar, pick a tokenizer and the model's shape, then walk the forward pass "
        "page by page. **Every tensor is a heatmap** with its formula, its line of PyTorch and a sentence on "
        "what it means. Change anything and everything after it is computed again."
    )
    loss_metrics(ctx)
    st.metric("Parameters", f"{ctx.model.num_params():,}")
with right:
    step_heatmap(ctx, f"blocks.{ctx.layer}.attn.hook_pattern", head=ctx.head if ctx.head is not None else 0,
                 title=f"Attention weights, layer {ctx.layer}", key="home", height=380, with_downloads=False)

st.subheader("Pages")
page_links()

st.subheader("The model, with the shapes of your batch")
B, T = ctx.batch.x.shape
st.markdown(figures.architecture_html(cfg, B, T), unsafe_allow_html=True)
st.caption(
    f"B={B} rows · T={T} positions · n_embd={cfg.n_embd} · n_head={cfg.n_head} · d_head={cfg.d_head} · "
    f"d_mlp={cfg.d_mlp} · vocab={cfg.vocab_size} · {cfg.n_layer} layer(s) · {cfg.norm}, {cfg.norm_placement}-norm · "
    f"{cfg.pos_encoding} positions · {cfg.activation}"
)

st.subheader("Parameters")
rows = ctx.model.parameter_table()
df = pd.DataFrame([{"tensor": r["name"], "shape": " × ".join(map(str, r["shape"])), "count": r["count"]} for r in rows])
with st.expander(f"All {len(df)} tensors", expanded=len(df) <= 16):
    st.table(df.set_index("tensor"))
c1, c2 = st.columns(2)
with c2:
    get("report.download")(ctx, key="home.report")
c1.download_button("⬇ Config (JSON)", cfg.to_json(), file_name="gptviz-config.json", mime="application/json")
