"""The Embeddings page's sections: the token lookup (and the same as one-hot × W_E), the positions, their
sum, and editing a token's embedding."""
from __future__ import annotations

import streamlit as st

from ...model.hook_names import act_name
from ...model.rope_scaling import inverse_frequencies, plain_frequencies, rotary_angles
from ...present import figures, matrices, readouts
from ...present.descriptions import step_info
from ..widgets import clear_edits_button, explain, plot, step_heatmap, vector_editor
from . import section


@section("embeddings.token")
def token(ctx, *, key: str = "emb") -> None:
    """Pick a row of W_E for each token."""
    step_heatmap(ctx, act_name("embed"), key=key)
    explain(step_info(ctx.trace(), act_name("embed")))


@section("embeddings.onehot")
def onehot(ctx, *, key: str = "onehot", expanded: bool | None = None) -> None:
    """The lookup as a matrix product one-hot(x) × W_E, checked against the lookup itself."""
    cfg, tr = ctx.cfg, ctx.trace()
    labels = ctx.labels()
    ids = ctx.batch.x[ctx.b, : ctx.n_pos].tolist()
    wte = ctx.model.transformer.wte.weight.detach().numpy()
    oh, rows, product, cols = matrices.embedding_lookup(wte, ids)
    col_labels = [ctx.id_label(i) for i in cols]
    with st.expander("The same thing as a matrix product: one-hot(x) × W_E",
                     expanded=cfg.vocab_size <= 64 if expanded is None else expanded):
        c1, c2 = st.columns(2)
        m1 = matrices.Matrix(oh, labels, col_labels, "position", "vocabulary", "probability",
                          hover_rows=matrices.token_hover(labels),
                          hover_cols=[f"id {i}: '{l}'" for i, l in zip(cols, col_labels)])
        with c1:
            plot(ctx, figures.heatmap(m1, "one-hot(x)" + ("" if len(cols) == cfg.vocab_size else
                                                         " (only the ids in the text)")), key=f"{key}.onehot")
        m2 = matrices.Matrix(rows, col_labels, [str(d) for d in range(cfg.n_embd)], "token", "d_model dim", "signed",
                          hover_rows=[f"id {i}: '{l}'" for i, l in zip(cols, col_labels)])
        with c2:
            plot(ctx, figures.heatmap(m2, "W_E (rows of the embedding table)"), key=f"{key}.wte")
        diff = readouts.lookup_difference(product, tr[act_name("embed")][ctx.b, : ctx.n_pos])
        st.success(f"one-hot(x) × W_E equals the lookup W_E[x]: largest difference {diff:.1e}.")


@section("embeddings.positions")
def positions(ctx, *, key: str = "pos") -> None:
    """The position table: learned, sin/cos, rotary angles, or none."""
    cfg, tr = ctx.cfg, ctx.trace()
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        step_heatmap(ctx, act_name("pos_embed"), key=key)
        explain(step_info(tr, act_name("pos_embed")))
    elif cfg.pos_encoding == "rope":
        labels = ctx.labels()
        ang = rotary_angles(cfg, ctx.n_pos, seq_len=ctx.n_pos).numpy()
        m = matrices.Matrix(ang, labels, [f"pair {i}" for i in range(ang.shape[1])], "position", "dimension pair",
                         "nonnegative", hover_rows=matrices.token_hover(labels))
        d = "d_head" if cfg.d_rot == cfg.d_head else "d_rot"
        scaled = cfg.rope_type != "default"
        formula = f"t · ω_i, ω_i scaled ({cfg.rope_type})" if scaled else f"t · base^(−2i/{d})"
        plot(ctx, figures.heatmap(m, f"Rotary angles θ[t, i] = {formula} (radians)"), key=f"{key}.rope")
        st.markdown("With rotary positions nothing is added to the token embedding. Inside attention each query and "
                    "key is turned pair by pair by these angles, so a score depends on how far apart two tokens are."
                    + ("" if cfg.d_rot == cfg.d_head else f" This model turns only the first d_rot = {cfg.d_rot} of "
                       f"each head's {cfg.d_head} dimensions (rotary_pct = {cfg.rotary_pct:g}); the rest pass "
                       "through unturned."))
        st.latex(r"\theta_{t,i} = t \cdot " + (r"\omega_i,\quad \omega_i = \text{scaled } " if scaled else "")
                 + r"b^{-2i/d_{" + d[2:] + r"}},\quad b = " + f"{cfg.rope_base:g}")
        if scaled:
            _scaling(ctx, key)
    else:
        st.info("This model has no position encoding (pos_encoding='none'): only the causal mask tells it about "
                "order.")


def _scaling(ctx, key: str) -> None:
    """A scaled model's rotary frequencies against plain ones (the formulas: ``gptviz.model.rope_scaling``)."""
    cfg, n = ctx.cfg, ctx.n_pos
    s, L = cfg.rope_factor, cfg.rope_original_max_pos
    plain = plain_frequencies(cfg.d_rot, cfg.rope_base).numpy()
    scaled = inverse_frequencies(cfg, seq_len=n).numpy()
    fig = figures.frequency_chart(plain, scaled, f"{cfg.rope_type}, factor {s:g}",
                                  f"Rotary frequencies, plain and scaled ({cfg.rope_type})")
    plot(ctx, fig, key=f"{key}.rope_freq")
    words = {
        "linear": f"Every frequency is divided by the factor {s:g}: position t turns as far as position t / {s:g} "
                  "did, so the angles the model was trained on stretch over that many times more positions.",
        "dynamic": f"Dynamic NTK: up to {L} positions the frequencies are plain; a longer text of n positions "
                   f"raises the base to b · ({s:g} · n / {L} − {s - 1:g})^(d/(d−2)), which slows the low "
                   f"frequencies most. This text has {n} positions"
                   + (", so they are plain." if n <= L else ": the angles above use its base."),
        "llama3": f"Llama 3: pairs whose wavelength 2π/ω is over {L / cfg.rope_low_freq_factor:g} positions "
                  f"(the original context {L} ÷ low_freq_factor) turn {s:g} times slower; pairs under "
                  f"{L / cfg.rope_high_freq_factor:g} (÷ high_freq_factor) keep their speed; between, a smooth "
                  "blend of the two.",
        "yarn": f"YaRN: pairs that turn more than {cfg.rope_beta_fast:g} times over the original {L} positions keep "
                f"their speed, pairs turning fewer than {cfg.rope_beta_slow:g} times turn {s:g} times slower, and "
                "the pairs between are blended.",
        "longrope": f"LongRoPE: each pair's frequency is divided by a factor of its own, from the short list for a "
                    f"text of up to {L} positions and from the long list for a longer one (every position alike). "
                    f"This text has {n} positions, so the {'long' if n > L else 'short'} list applies.",
    }
    att = cfg.rope_attention_factor
    st.markdown(words[cfg.rope_type] + ("" if att == 1 else f" cos and sin are also multiplied by {att:.4g}, "
                                                               f"so every attention score by {att * att:.4g}."))


@section("embeddings.sum")
def total(ctx, *, key: str = "sum") -> None:
    """Token plus position: the residual stream that enters layer 0."""
    step_heatmap(ctx, act_name("resid_pre", 0), key=key)
    explain(step_info(ctx.trace(), act_name("resid_pre", 0)))


@section("embeddings.edit")
def edit(ctx, *, key: str = "emb") -> None:
    """Edit one position's token embedding; every later step is recomputed (the weights are not touched)."""
    labels = ctx.labels()
    st.markdown("Change the numbers and every later step, on every page, is recomputed from them. The weights are "
                "not touched.")
    pos = st.selectbox("Position", list(range(ctx.n_pos)), format_func=lambda t: f"{t}: '{labels[t]}'",
                       key=f"{key}.pos")
    vector_editor(ctx, act_name("embed"), pos, key=key)
    clear_edits_button(ctx, key=key)
