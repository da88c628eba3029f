"""The Initialisation page's sections: why the initial scale of the weights matters, measured live on fresh
models of the configured shape and on the current batch.

Each expensive result is cached (``st.cache_data``) on the config's JSON and the batch as tuples; a view
change (a position, a layer, a scale picked from the list) reruns only the drawing.
"""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import streamlit as st

from ...config import ACTIVATIONS, ModelConfig
from ...present.figures import initialisation as fi
from ...text.batches import BUILTIN_TEXT
from ...training import init_study as study
from ..widgets import plot
from . import section

MAX_HIST_LAYERS = 4  # more layers than this: histograms for the sidebar's layer only
TRAIN_STEPS = 200
LARGE_CHOICES = [0.2, 0.5, 1.0, 2.0]
SAT_CHOICES = [0.02, 0.1, 0.2, 0.5, 1.0, 2.0]


def _cfg(cfg_json: str) -> ModelConfig:
    return ModelConfig.from_dict(json.loads(cfg_json))


def _tup(t) -> tuple:
    return tuple(map(tuple, t.tolist()))


def _batch(ctx) -> tuple:
    b = ctx.batch
    return _tup(b.x), _tup(b.y), _tup(b.attention_mask)


def _fmt(s: float) -> str:
    return f"{s:.3g}"


# --------------------------------------------------------------------------- cached engine calls
@st.cache_data(max_entries=16, show_spinner="Building 13 fresh models…")
def _sweeps(cfg_json: str, x: tuple, y: tuple, mask: tuple) -> tuple[dict, dict | None]:
    """The loss sweep and the saturation sweep of the model's own activation (None for a model whose MLP the
    study replaces), from one pass of each fresh model: a new text costs 13 passes, not 26."""
    return study.sweeps(_cfg(cfg_json), x, y, mask)


@st.cache_data(max_entries=16, show_spinner=False)
def _distributions(cfg_json: str, x: tuple, y: tuple, mask: tuple, init_std: float, row: int) -> list[dict]:
    """Every position's first guess at once, so picking another position is only a redraw."""
    return study.initial_distributions(_cfg(cfg_json), x, mask, init_std, row=row, y=y)


@st.cache_data(max_entries=16, show_spinner="Training a small model for a few hundred steps…")
def _curve(cfg_json: str, ids_key: str, _ids: tuple, scale: float, steps: int) -> dict:
    # _ids (up to 20,000 token ids) is not hashed by Streamlit (a leading underscore): ids_key, its digest, stands
    # for it. Hashing the tuple element by element took about 30 ms on every rerun, cached or not.
    return study.training_curves(_cfg(cfg_json), _ids, scales=(scale,), steps=steps)


def _ids_key(ids: tuple) -> str:
    """A digest of the token ids: equal ids, equal key."""
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).hexdigest()


def _curves(cfg_json: str, ids: tuple, scales: tuple, steps: int) -> dict:
    """One cached training per scale, merged: changing the large scale leaves the small run cached."""
    key = _ids_key(ids)
    runs = [_curve(cfg_json, key, ids, float(s), steps) for s in scales]
    out = dict(runs[0])
    for k in ("scales", "curves", "seconds"):
        out[k] = [v for r in runs for v in r[k]]
    return out


@st.cache_data(max_entries=32, show_spinner=False)
def _act_stats(cfg_json: str, x: tuple, y: tuple, mask: tuple, init_std: float, activation: str) -> dict:
    return study.activation_stats(_cfg(cfg_json), x, y, mask, init_std=init_std, activation=activation)


@st.cache_data(max_entries=16, show_spinner="Tracing 13 fresh models with gradients…")
def _act_sweep(cfg_json: str, x: tuple, y: tuple, mask: tuple, activation: str) -> dict:
    return study.activation_sweep(_cfg(cfg_json), x, y, mask, activation=activation)


@st.cache_data(max_entries=16, show_spinner=False)
def _spread(n: int) -> dict:
    return study.spread_demo(n)


@st.cache_data(max_entries=16, show_spinner=False)
def _resid(cfg_json: str, x: tuple, mask: tuple, init_std: float) -> dict:
    return study.residual_stds(_cfg(cfg_json), x, mask, init_std)


# --------------------------------------------------------------------------- guards
def _too_big(ctx, limit: int, what: str) -> bool:
    n = ctx.cfg.num_params()
    if n > limit:
        st.info(f"This model has {n / 1e6:.2g}M parameters: {what} is skipped above {limit / 1e6:g}M, "
                "so the page stays responsive. A smaller shape or vocabulary (e.g. the *default* preset with the "
                "char BPE tokenizer) shows it.", icon=":material/speed:")
        return True
    return False


def _fresh_note(ctx) -> None:
    if ctx.entry is not None:
        st.caption("A loaded model is shown elsewhere: here every number comes from **fresh** models of its shape. "
                   "Its trained weights play no part.")


# --------------------------------------------------------------------------- fact 1
@section("init.loss_sweep")
def loss_sweep(ctx, *, key: str = "sweep") -> None:
    """The initial loss against init_std, with ln V and the user's own init_std marked."""
    cfg = ctx.cfg
    if _too_big(ctx, study.MAX_SWEEP_PARAMS, "the sweep over 13 fresh models"):
        return
    try:
        sw = _sweeps(ctx.cfg_json, *_batch(ctx))[0]
    except ValueError as exc:
        st.warning(f"The sweep could not run on this batch: {exc}")
        return
    T = int(ctx.batch.attention_mask.sum(1).max())
    title = f"Initial loss against init_std · V = {cfg.vocab_size:,}, T = {T}"
    plot(ctx, fi.loss_sweep_figure(sw, title), key=f"{key}.fig")
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("ln V", f"{sw['ln_v']:.3f}", help=f"V = {cfg.vocab_size:,} tokens")
    c2.metric(f"loss at init_std {_fmt(sw['scales'][0])}", f"{sw['losses'][0]:.3f}")
    c3.metric(f"loss at your init_std {_fmt(sw['current_std'])}", f"{sw['current_loss']:.3f}")
    c4.metric(f"loss at init_std {_fmt(sw['scales'][-1])}", f"{sw['losses'][-1]:.3f}")
    st.markdown(
        "Before any training the model knows nothing, so its honest answer is *every token equally likely*: "
        "p = 1/V for each, a loss of −ln(1/V) = **ln V**. Small weights give logits near 0 and exactly that. "
        "Large weights give big logits, so the model starts out *confident* — and, knowing nothing, confidently "
        "wrong: the loss climbs far above ln V. If your first loss is well above ln V, your init is too large.")
    st.latex(r"z \approx 0 \;\Rightarrow\; p_i = \frac{e^{z_i}}{\sum_j e^{z_j}} \approx \frac1V"
             r"\;\Rightarrow\; \mathcal{L}_0 = -\ln \tfrac1V = \ln V")
    st.code("for s in scales:\n"
            "    _, loss = GPT(cfg.replace(init_std=s))(x, y, attention_mask)  # same seed, new scale",
            language="python")
    _fresh_note(ctx)


# --------------------------------------------------------------------------- fact 2
def _default_pos(ctx) -> int:
    n, y = ctx.n_pos, ctx.batch.y[ctx.b]
    scored = [i for i in range(n) if int(y[i]) >= 0]
    return scored[-1] if scored else n - 1


@section("init.first_guess")
def first_guess(ctx, *, key: str = "guess") -> float:
    """The next-token distribution of a fresh model at a small and at a large init_std, side by side.
    Returns the large init_std chosen (for ``training``)."""
    if _too_big(ctx, study.MAX_SWEEP_PARAMS, "this comparison"):
        return study.LARGE_STD
    labels, vocab = ctx.labels(), ctx.vocab_labels()
    c1, c2 = st.columns([3, 2])
    row = tuple(int(i) for i in ctx.batch.x[ctx.b, :ctx.n_pos])
    pos = c1.selectbox("Position", list(range(ctx.n_pos)), index=_default_pos(ctx),
                       key=f"{key}.pos.{hash(row) & 0xffffff:x}",  # new text: back to its last position
                       format_func=lambda i: f"{i}: {labels[i]!r}", help="Whose next token to look at.")
    large = c2.select_slider("Large init_std", LARGE_CHOICES, value=study.LARGE_STD, key=f"{key}.large")
    cols = st.columns(2)
    for col, s in zip(cols, (study.SMALL_STD, large)):
        d = _distributions(ctx.cfg_json, *_batch(ctx), float(s), ctx.b)[int(pos)]
        tgt = "" if d["target"] is None else f" · p(target) {d['target_prob']:.3f}"
        title = f"init_std {_fmt(s)} · max p {d['max_prob']:.2f}{tgt}"
        with col:
            plot(ctx, fi.prob_figure(d["probs"], vocab, title, target=d["target"]), key=f"{key}.p{s}")
            st.caption(f"Entropy {d['entropy']:.2f} nats (ln V = {d['ln_v']:.2f} is the most it can be) · "
                       f"std of the logits {d['logit_std']:.3g}" +
                       ("" if d["target"] is None else f" · the true next token ({vocab[d['target']]!r}) is red"))
    st.markdown("At the small scale every bar is near the dashed 1/V line: a humble guess. At the large one a few "
                "tokens take nearly all the probability, for no reason but the luck of the random weights.")
    st.latex(r"p = \mathrm{softmax}(z),\qquad z = \mathrm{ln_f}(h)\,W_U^\top,\qquad "
             r"\mathrm{std}(z) \approx \sigma_{\text{init}}\sqrt{n_\text{embd}}")
    st.code("probs = F.softmax(logits[b, t], dim=-1)  # the first guess, before any training", language="python")
    return float(large)


def _training_ids(ctx) -> tuple[tuple, str]:
    """Token ids to train on: the user's text if long enough, else the built-in text, else the batch repeated."""
    need = min(32, ctx.cfg.block_size) + 2
    for text, what in ((ctx.s.get("text") or "", "your text"), (BUILTIN_TEXT, "the built-in text")):
        try:
            ids = [i for i in ctx.tok.encode(text) if 0 <= i < ctx.cfg.vocab_size][:20_000]
        except Exception:  # noqa: BLE001 - a tokenizer that cannot read this text: try the next one
            continue
        if len(ids) >= max(need, 64 if what == "your text" else 0):
            return tuple(ids), what
    row = [int(i) for i in ctx.batch.x[ctx.b, :ctx.n_pos]]
    return tuple(row * (need // max(1, len(row)) + 2)), "the batch, repeated"


@section("init.training")
def training(ctx, *, key: str = "train", large: float = study.LARGE_STD) -> None:
    """A short seeded training from a small and from a large init_std: two loss curves on one chart."""
    if _too_big(ctx, study.MAX_TRAIN_PARAMS, "live training"):
        return
    ids, what = _training_ids(ctx)
    try:
        tc = _curves(ctx.cfg_json, ids, (study.SMALL_STD, float(large)), TRAIN_STEPS)
    except ValueError as exc:
        st.warning(f"The short training could not run: {exc}")
        return
    plot(ctx, fi.curves_figure(tc), key=f"{key}.fig")
    a, b = tc["curves"]
    st.caption(f"{TRAIN_STEPS} steps of AdamW (lr 3e-3, batch 16, seeded) on {what} ({tc['tokens']:,} tokens), "
               f"from init_std {_fmt(tc['scales'][0])} and {_fmt(tc['scales'][1])} "
               f"({tc['seconds'][0]:.1f} s and {tc['seconds'][1]:.1f} s). "
               f"Final loss {a[-1]:.2f} against {b[-1]:.2f}.")
    st.markdown("The confident start first has to *unlearn* its random opinions — its early steps go into "
                "shrinking the logits, not into learning the text — and large weights also saturate what comes "
                "next (fact 3). The same number of steps leaves it behind.")
    st.code("tc = TrainConfig(steps=200, batch_size=16, lr=3e-3, schedule='constant')\n"
            "model, hist = train(GPT(cfg.replace(init_std=s)), task, tc)  # hist.loss: the curve", language="python")


# --------------------------------------------------------------------------- fact 3
_DL = r"\frac{\partial\mathcal L}{\partial x} = \frac{\partial\mathcal L}{\partial y}"
_SATURATION_LATEX = {
    "tanh": r"y = \tanh(x),\qquad " + _DL + r"\,(1 - \tanh^2 x),\qquad |\tanh x| > 0.97 \Rightarrow 1-\tanh^2 x < 0.06",
    "relu": r"y = \max(0, x),\qquad " + _DL + r"\cdot \mathbb 1[x > 0]",
    "gelu": r"y = x\,\Phi(x),\qquad " + _DL + r"\,\big(\Phi(x) + x\,\varphi(x)\big),\qquad "
            r"x < -3 \Rightarrow |\Phi(x) + x\varphi(x)| < 0.012",
}
_ACT_CODE = {"tanh": "torch.tanh(self.c_fc(x))", "relu": "F.relu(self.c_fc(x))", "gelu": "F.gelu(self.c_fc(x))",
             "gelu_tanh": 'F.gelu(self.c_fc(x), approximate="tanh")'}
_SATURATION_TEXT = {
    "tanh": "With a large init the MLP's inputs are spread wide, and tanh squashes most of them flat against ±1 "
            "(the red bars). There its slope is almost 0, so whatever gradient arrives at the activation's output is "
            "multiplied by almost 0 on its way to the input: those units cannot learn. The solid lines show how much "
            "of the gradient gets through; it falls as the dashed share of saturated units rises. (The gradient "
            "*arriving* can itself grow with init_std, because every other weight grew too: the ratio is what "
            "saturation takes away.)",
    "relu": "ReLU is flat on its whole negative half: a unit whose input is ≤ 0 outputs exactly 0 and passes no "
            "gradient at all. About half the units are off at *any* scale (ReLU has no preferred size, so the share "
            "hardly moves with init_std) and about half the gradient gets through. A unit whose input stays negative "
            "for every token never learns again: a *dead* ReLU. Pick **tanh** to see saturation grow with scale.",
    "gelu": "GELU goes flat only on its far negative side (input below −3, the red bars). At a small init every "
            "input sits near 0, where GELU's slope is about ½, so about half the gradient gets through; a large init "
            "pushes a growing share into the flat tail (dashed lines), but the positive side keeps passing gradient, "
            "so GELU degrades far more gently than tanh. Pick **tanh** to see saturation in full.",
}


@section("init.saturation")
def saturation(ctx, *, key: str = "sat") -> None:
    """MLP pre/post-activation histograms per layer, the share saturated, and the gradient either side."""
    cfg = ctx.cfg
    if not study.has_mlp(cfg):
        st.info("This model's MLPs are mixtures of experts: each expert sees only the tokens routed to it, so this "
                "study of one MLP's activations does not apply (the Experts page shows the routing)."
                if cfg.n_expert else "This model is attention-only: it has no MLP, so there is no activation to "
                "saturate. Untick *Attention only* in the sidebar to see this part.", icon=":material/info:")
        return
    if _too_big(ctx, study.MAX_SWEEP_PARAMS, "this study"):
        return
    c1, c2 = st.columns([3, 2])
    acts = [a for a in ACTIVATIONS if a in study.SATURATION_WORDS]
    own = cfg.activation if cfg.activation in acts and not cfg.gated_mlp else "gelu"
    if own != cfg.activation or cfg.gated_mlp:
        st.caption(f"This model's MLP is {'gated, ' if cfg.gated_mlp else ''}{cfg.activation}: the study uses a plain "
                   "MLP of the same shape with the activation picked here (saturation is the plain activation's "
                   "story; a gate multiplies what passes).")
    act = c1.radio("Activation", acts, index=acts.index(own), horizontal=True,
                   key=f"{key}.act.{cfg.activation}",  # a new shared activation resets this choice to it
                   help="Starts on your model's activation; tanh shows saturation most plainly.")
    std = c2.select_slider("init_std", SAT_CHOICES, value=study.LARGE_STD, key=f"{key}.std")
    stats = _act_stats(ctx.cfg_json, *_batch(ctx), float(std), act)
    st.caption(f"Saturated means {stats['rule']}. Counted over every real token × {cfg.d_mlp} hidden units.")
    layers = stats["layers"]
    if len(layers) > MAX_HIST_LAYERS:
        st.caption(f"Histograms for layer {ctx.layer} (choose it in the sidebar); the charts below show every layer.")
        layers = [layers[ctx.layer]]
    for d in layers:
        plot(ctx, fi.histogram_figure(d, act, std), key=f"{key}.h{d['layer']}")
    plot(ctx, fi.grad_figure(stats), key=f"{key}.grad")
    sweep = _sweeps(ctx.cfg_json, *_batch(ctx))[1] if act == cfg.activation else None
    if sweep is None:  # another activation than the model's, or a gated MLP: its own 13 passes
        sweep = _act_sweep(ctx.cfg_json, *_batch(ctx), act)
    plot(ctx, fi.saturation_sweep_figure(sweep, chosen=float(std)), key=f"{key}.sweep")
    kind = "tanh" if act == "tanh" else "relu" if act == "relu" else "gelu"
    st.markdown(_SATURATION_TEXT[kind])
    st.latex(_SATURATION_LATEX[kind])
    st.code(f"h = {_ACT_CODE[act]}  # tr[act_name('pre', l)] -> tr[act_name('post', l)]\n"
            "g = tr.grad(act_name('pre', 0))  # tr = trace(model, x, y, grads=True)",
            language="python")


# --------------------------------------------------------------------------- keeping the spread
@section("init.spread")
def spread(ctx, *, key: str = "spread") -> None:
    """x @ W with W ~ N(0, 1/n) keeps std(x), N(0, 1) multiplies it by √n; and the residual stream's std."""
    n = ctx.cfg.n_embd
    demo = _spread(n)
    c1, c2, c3 = st.columns(3)
    c1.metric("std(x)", f"{demo['std_x']:.3f}")
    c2.metric("std(x W) / std(x), W ~ N(0, 1/n)", f"{demo['ratio_scaled']:.3f}")
    c3.metric("std(x W) / std(x), W ~ N(0, 1)", f"{demo['ratio_unit']:.3f}", help=f"√n = √{n} = {math.sqrt(n):.3f}")
    plot(ctx, fi.spread_figure(demo), key=f"{key}.demo")
    st.markdown(f"Each output of `x @ W` adds up n = {n} products. Their variances add, so the output's variance is "
                "n · Var(x) · Var(W). Choose Var(W) = 1/n and the spread is kept, layer after layer; choose 1 and "
                f"it grows by √n ≈ {math.sqrt(n):.1f} at every matrix.")
    st.latex(r"\mathrm{Var}\Big(\sum_{i=1}^{n} x_i W_{ij}\Big) = n\,\mathrm{Var}(x)\,\mathrm{Var}(W)"
             r"\quad\Rightarrow\quad W \sim \mathcal N\!\big(0, \tfrac1n\big) \text{ keeps } \mathrm{std}(x)")
    st.code(f"x = torch.randn(2000, {n}); W = torch.randn({n}, {n}) / {n}**0.5; (x @ W).std()  # ≈ x.std()",
            language="python")
    if _too_big(ctx, study.MAX_SWEEP_PARAMS, "the residual-stream study"):
        return
    x, _, mask = _batch(ctx)
    scales = [ctx.cfg.init_std] + ([1.0] if not math.isclose(ctx.cfg.init_std, 1.0) else [0.02])
    results = [_resid(ctx.cfg_json, x, mask, float(s)) for s in scales]
    plot(ctx, fi.residual_figure(results), key=f"{key}.resid")
    st.caption(f"Your init_std ({_fmt(ctx.cfg.init_std)}) in red; 1/√n_embd would be {1 / math.sqrt(n):.3g}. "
               "GPT-2 uses 0.02 (below 1/√768 ≈ 0.036) and scales the projections that write into the stream down "
               "by a further 1/√(2 · n_layer), so adding blocks does not blow the stream up.")
