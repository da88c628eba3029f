"""What each recorded step means, in words: its title, formula, sentence and the line of PyTorch that makes it.

The facts of a step (stage, layer, axes, kind of values) come from ``gptviz.run.step_meta``; this module adds
the words, kept apart from the model so the model file stays as readable as nanoGPT's.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Optional

from ..config import ModelConfig
from ..run.step_meta import MASKED, NONNEGATIVE, PROBABILITY, SIGNED, StepMeta, split_name, step_meta
from .descriptions_later import later_models_words
from .descriptions_moe import moe_words
from .source_code import step_code

__all__ = ["StepInfo", "describe", "step_info", "SIGNED", "NONNEGATIVE", "PROBABILITY", "MASKED"]


@dataclass(frozen=True)
class StepInfo(StepMeta):
    """A step's facts (``StepMeta``) and its words."""
    title: str = ""  # a short label for a menu
    formula: str = ""  # LaTeX, for st.latex
    explanation: str = ""  # one plain-English sentence
    code: str = ""  # the lines of gptviz's source that compute it (gptviz.present.source_code)


def _norm_info(name: str, which: str, layer: Optional[int], part: str, cfg: ModelConfig,
               stack: str = "decoder") -> tuple:
    label = {"ln1": "LN₁", "ln2": "LN₂", "ln_final": "final norm", "ln_cross": "LN cross",
             "enc_ln_final": "encoder final norm", "ln1_post": "LN₁ post", "ln2_post": "LN₂ post"}[which]
    tex = {"ln1": r"\mathrm{LN}_1", "ln2": r"\mathrm{LN}_2", "ln_final": r"\mathrm{LN}_f",
           "ln_cross": r"\mathrm{LN}_c", "enc_ln_final": r"\mathrm{LN}_{f,\mathrm{enc}}",
           "ln1_post": r"\mathrm{LN}_1^{\mathrm{post}}", "ln2_post": r"\mathrm{LN}_2^{\mathrm{post}}"}[which]
    mid = r"x_{\mathrm{cross}}" if cfg.n_enc_layer >= 0 and stack == "decoder" else r"x_{\mathrm{mid}}"
    if which in ("ln1_post", "ln2_post"):  # Gemma 2, 3 and OLMo 2: a sublayer's output, before the residual add
        source = r"\mathrm{attn}(\cdot)" if which == "ln1_post" else r"\mathrm{mlp}(\cdot)"
        where = ("attention's" if which == "ln1_post" else "the MLP's") + " output, before it is added to the stream"
    elif which in ("ln_final", "enc_ln_final"):
        source = r"x^{(L)}"
        where = "the last " + ("encoder " if which == "enc_ln_final" else "") + "layer's residual stream"
    elif which == "ln_cross":
        source = r"x_{\mathrm{mid}}" if cfg.norm_placement == "pre" else \
            r"(x_{\mathrm{mid}} + \mathrm{cross}(x_{\mathrm{mid}}, \mathrm{enc}))"
        where = ("the residual stream, before cross-attention" if cfg.norm_placement == "pre"
                 else "the residual stream plus the cross-attention output (post-norm)")
    elif cfg.norm_placement == "pre" and which == "ln2":
        source = mid
        where = "the residual stream, before the MLP"
    elif which == "ln2":
        source = rf"({mid} + \mathrm{{mlp}}({mid}))"
        where = "the residual stream plus the MLP output (post-norm)"
    elif cfg.norm_placement == "pre":
        source = r"x_{\mathrm{pre}}" if which == "ln1" else r"x_{\mathrm{mid}}"
        where = "the residual stream, before " + ("attention" if which == "ln1" else "the MLP")
    else:
        source = r"(x_{\mathrm{pre}} + \mathrm{attn}(x_{\mathrm{pre}}))" if which == "ln1" else \
            r"(x_{\mathrm{mid}} + \mathrm{mlp}(x_{\mathrm{mid}}))"
        where = "the residual stream plus the " + ("attention" if which == "ln1" else "MLP") + " output (post-norm)"
    layer_norm = cfg.norm == "layernorm"
    shift = r" + \beta" if cfg.bias else ""
    if part == "hook_scale":
        formula = (rf"\sigma = \sqrt{{\tfrac{{1}}{{d}}\textstyle\sum_i (x_i - \mu)^2 + \epsilon}},\quad x = {source}"
                   if layer_norm else rf"\mathrm{{rms}} = \sqrt{{\tfrac{{1}}{{d}}\textstyle\sum_i x_i^2 + \epsilon}},"
                   rf"\quad x = {source}")
        return (f"{label} divisor", formula,
                ("The size of each position's vector in " + where + ": its standard deviation" if layer_norm
                 else "The root mean square of each position's vector in " + where)
                + ", which the norm divides by.")
    if part == "hook_normalized":
        formula = r"\hat{x} = \frac{x - \mu}{\sigma}" if layer_norm else r"\hat{x} = \frac{x}{\mathrm{rms}}"
        return (f"{label} normalised", formula,
                "Each position's vector " + ("centred and " if layer_norm else "")
                + "scaled to unit size, before the learned weight" + (" and shift." if cfg.bias else "."))
    formula = rf"{tex}(x) = \gamma \odot \hat{{x}}{shift}"
    return (f"{label} output", formula,
            "The normalised vector times the learned per-dimension weight γ"
            + (" plus the shift β." if cfg.bias else "."))


def describe(name: str, cfg: ModelConfig) -> StepInfo:
    """The StepInfo of hook ``name`` in a model of this config, kept per both. Unknown names raise ValueError."""
    try:
        return _describe_step(name, cfg)
    except TypeError:  # a config holding something unhashable: worked out each time
        return _describe_step.__wrapped__(name, cfg)


@functools.lru_cache(maxsize=4096)  # both frozen; finding a step's source lines takes ~1 ms, a dozen a rerun
def _describe_step(name: str, cfg: ModelConfig) -> StepInfo:
    meta = step_meta(name, cfg)
    layer, rest, stack = split_name(name, cfg)
    words = _describe(rest, layer, cfg, stack) if cfg.n_enc_layer >= 0 else _describe(rest, layer, cfg)
    if words is None:
        raise ValueError(f"{name!r} is not a step gptviz knows")
    title, formula, explanation = words
    if layer is not None:
        title = f"{'enc ' if stack == 'encoder' else ''}L{layer} {title}"
    return StepInfo(**{f.name: getattr(meta, f.name) for f in dataclasses.fields(meta)}, title=title,
                    formula=formula, explanation=explanation, code=step_code(name, cfg))


def step_info(trace, name: str) -> StepInfo:
    """``describe`` for a step of this trace's model."""
    return describe(name, trace.config)


def _describe(rest: str, layer: Optional[int], cfg: ModelConfig, stack: str = "decoder"):
    if cfg.n_enc_layer >= 0:
        info = _describe_seq2seq(rest, layer, cfg, stack)
        if info is not None:
            return info
        if rest.startswith(("hook_enc_", "cross_attn.")) or rest in ("hook_cross_out", "hook_resid_cross"):
            return None
    elif rest.startswith(("hook_enc_", "enc_ln_final.", "cross_attn.", "ln_cross.")) or \
            rest in ("hook_cross_out", "hook_resid_cross"):
        return None  # a decoder-only model has no encoder and no cross-attention
    moe = moe_words(rest, layer, cfg)  # a mixture of experts' steps, an attention sink
    if moe is not None:
        return moe
    hs = cfg.d_head
    tied = cfg.tie_weights
    norm_parts = re.match(r"^(ln1_post|ln2_post|ln1|ln2|ln_cross|ln_final|enc_ln_final)\."
                          r"(hook_scale|hook_normalized|hook_out)$", rest)
    if norm_parts:
        which, part = norm_parts.groups()
        return _norm_info(rest, which, layer, part, cfg, stack)
    act_tex = {
        "gelu": r"\mathrm{GELU}(h) = h\,\Phi(h)",
        "gelu_tanh": r"\mathrm{GELU}(h) \approx \tfrac{h}{2}\bigl(1 + "
                     r"\tanh\bigl(\sqrt{2/\pi}\,(h + 0.044715\,h^3)\bigr)\bigr)",
        "relu": r"\mathrm{ReLU}(h) = \max(0, h)",
        "tanh": r"\tanh(h) = \frac{e^{h} - e^{-h}}{e^{h} + e^{-h}}",
        "silu": r"\mathrm{SiLU}(h) = h\,\sigma(h) = \frac{h}{1 + e^{-h}}",
        # GPT-OSS's experts: g' = min(g, L), then (clamp(u, -L, L) + 1) · g'·σ(α g')
        "gpt_oss_glu": r"(\mathrm{clamp}(u, \pm L) + 1)\, g'\,\sigma(\alpha g'),\; g' = \min(g, L)",
    }[cfg.activation]
    pre = cfg.norm_placement == "pre"
    nh, nkv = cfg.n_head, cfg.n_kv_head
    grouped = nkv != nh
    k_at, v_at = ((r"d", r"d + d_{kv}") if grouped else (r"d", r"2d"))
    g = "g" if grouped else "h"  # a key/value head, or (without grouping) the head
    window = cfg.layer_window(layer) if layer is not None and stack == "decoder" else None  # a sliding window
    table = {
        "hook_embed": (
            "Token embedding", r"E_{b,t} = W_E[x_{b,t}] = \mathrm{onehot}(x_{b,t})\,W_E",
            "Each token id picks its row of the embedding table W_E, which is the same as multiplying a one-hot "
            "vector by W_E."),
        "hook_pos_embed": (
            "Position embedding", r"P_{t} = W_P[t]" if cfg.pos_encoding == "learned" else
            r"P_{t,2i} = \sin\!\bigl(t / 10000^{2i/d}\bigr),\; P_{t,2i+1} = \cos\!\bigl(t / 10000^{2i/d}\bigr)",
            "Each position picks its row of the learned position table W_P, so the model can tell places apart."
            if cfg.pos_encoding == "learned" else
            "Each position gets a fixed pattern of sines and cosines at many wavelengths, so the model can tell "
            "places apart."),
        "hook_resid_pre": (
            "residual stream in",
            (r"x^{(0)} = E + P" if cfg.pos_encoding in ("learned", "sinusoidal") else r"x^{(0)} = E")
            if layer == 0 else rf"x^{{({layer})}}_{{\mathrm{{pre}}}} = "
            rf"x^{{({layer - 1 if layer else 0})}}_{{\mathrm{{post}}}}",
            ("The residual stream entering the first layer: " + (
                "token embedding plus position embedding." if cfg.pos_encoding in ("learned", "sinusoidal")
                else "the token embedding alone (positions enter inside attention)." if cfg.pos_encoding == "rope"
                else "the token embedding alone (this model has no position signal but the causal mask).")
             ) if layer == 0 else "The residual stream entering this layer: the previous layer's output."),
        "attn.hook_qkv": (
            "QKV projection", r"[Q\;K\;V] = \mathrm{LN}_1(x)\,W_{QKV}" + (r" + b_{QKV}" if cfg.qkv_bias else "") if pre
            else r"[Q\;K\;V] = x\,W_{QKV}" + (r" + b_{QKV}" if cfg.qkv_bias else ""),
            f"One matrix multiply makes every head's query, key and value at once: 3 × {cfg.n_head} heads × "
            f"{hs} numbers per position." if not grouped else
            f"One matrix multiply makes every query, key and value at once: {nh} query heads and {nkv} key/value "
            f"heads (grouped-query attention), ({nh} + 2 × {nkv}) × {hs} numbers per position."),
        "attn.hook_q": (
            "Q per head", r"Q_h = [Q\;K\;V]_{:,\,h d_h : (h+1) d_h}",
            "The query block split into heads: what each position is looking for, one vector per head."),
        "attn.hook_k": (
            "K per head" if not grouped else "K per key/value head",
            rf"K_{g} = [Q\;K\;V]_{{:,\,{k_at} + {g} d_h : {k_at} + ({g}+1) d_h}}",
            "The key block split into heads: what each position offers to be found by, one vector per head."
            if not grouped else f"The key block split into its {nkv} key/value heads: what each position offers to "
                                f"be found by. Each is shared by {nh // nkv} query heads."),
        "attn.hook_v": (
            "V per head" if not grouped else "V per key/value head",
            rf"V_{g} = [Q\;K\;V]_{{:,\,{v_at} + {g} d_h : {v_at} + ({g}+1) d_h}}",
            "The value block split into heads: what each position hands on when it is attended to."
            if not grouped else f"The value block split into its {nkv} key/value heads: what each position hands "
                                f"on when it is attended to."),
        "attn.hook_q_normed": (
            "Q normalised per head (QK-norm)",
            r"\hat{q}_{t,h} = \gamma_Q \odot q_{t,h} \,/\, "
            r"\sqrt{\tfrac{1}{d_h}\textstyle\sum_i q_{t,h,i}^2 + \epsilon}",
            f"QK-norm: each head's query divided by its root mean square over its {hs} dimensions, then times a "
            "learned per-dimension gain γ_Q shared by every head. The scores can no longer grow just because the "
            "queries do: how sharp a head can attend is set by the gains."
            + (" The rotation by position (RoPE) comes after." if cfg.pos_encoding == "rope" else "")),
        "attn.hook_k_normed": (
            "K normalised per head (QK-norm)" if not grouped else "K normalised per key/value head (QK-norm)",
            rf"\hat{{k}}_{{t,{g}}} = \gamma_K \odot k_{{t,{g}}} \,/\, "
            rf"\sqrt{{\tfrac{{1}}{{d_h}}\textstyle\sum_i k_{{t,{g},i}}^2 + \epsilon}}",
            "Each head's key divided by its root mean square, then times a learned gain γ_K of its own: the same "
            "norm as the queries', with its own weights."),
        "attn.hook_k_rep": (
            "K repeated to query heads", rf"K_h = K_{{\lfloor h / {nh // max(1, nkv)} \rfloor}}",
            f"Grouped-query attention: each of the {nkv} key heads is copied for the {nh // max(1, nkv)} query heads "
            f"that share it, so query head h reads key head ⌊h / {nh // max(1, nkv)}⌋. Fewer key heads make a "
            "smaller cache when generating; the copies cost nothing to learn."),
        "attn.hook_v_rep": (
            "V repeated to query heads", rf"V_h = V_{{\lfloor h / {nh // max(1, nkv)} \rfloor}}",
            f"Each of the {nkv} value heads copied for the query heads that share it."),
        "attn.hook_rot_q": (
            "Q rotated (RoPE)", r"\tilde{q}_{t,i} = q_{t,i}\cos t\theta_i - q_{t,i+d/2}\sin t\theta_i,\;"
            r"\tilde{q}_{t,i+d/2} = q_{t,i+d/2}\cos t\theta_i + q_{t,i}\sin t\theta_i,\; \theta_i = b^{-2i/d}"
            + ("" if cfg.rope_type == "default" else rf"\text{{, scaled ({cfg.rope_type})}}"),
            "Each pair of query dimensions is turned by an angle that grows with the position, so scores depend "
            "on relative distance."
            + ("" if cfg.rope_type == "default" else f" This model scales the angles ({cfg.rope_type}, factor "
               f"{cfg.rope_factor:g}): the Embeddings page draws each pair's frequency, plain and scaled"
               + ("." if cfg.rope_attention_factor == 1 else f"; cos and sin are also multiplied by "
                  f"{cfg.rope_attention_factor:.4g}."))),
        "attn.hook_rot_k": (
            "K rotated (RoPE)", r"\tilde{k}_{t,i} = k_{t,i}\cos t\theta_i - k_{t,i+d/2}\sin t\theta_i,\;"
            r"\tilde{k}_{t,i+d/2} = k_{t,i+d/2}\cos t\theta_i + k_{t,i}\sin t\theta_i",
            "Each pair of key dimensions is turned by the same position-dependent angles as the queries."),
        "attn.hook_scores_raw": (
            "scores QKᵀ", r"S_h = Q_h K_h^{\top}",
            "Every query dotted with every key: how well what position i looks for matches what position j offers."),
        "attn.hook_scores_scaled": (
            "scores ÷ √d_head", rf"S_h / \sqrt{{d_{{head}}}} = S_h / \sqrt{{{hs}}}",
            f"The scores divided by √{hs} so that their spread does not grow with the head width and the "
            "softmax stays soft."),
        "attn.hook_attn_scores": (
            "masked scores", r"S'_{ij} = \begin{cases} S_{ij}/\sqrt{d_{head}} & j \le i \text{ and key } j "
            r"\text{ is not padding} \\ -\infty & \text{otherwise} \end{cases}",
            "Future positions (and padding) are set to −∞, so a token can only attend to itself and what came before.")
        if window is None else (
            "masked scores (sliding window)", rf"S'_{{ij}} = \begin{{cases}} S_{{ij}}/\sqrt{{d_{{head}}}} & "
            rf"i - {window} < j \le i \text{{ and key }} j \text{{ is not padding}} \\ -\infty & "
            r"\text{otherwise} \end{cases}",
            f"This layer attends within a sliding window of {window} positions: future positions, keys more than "
            f"{window - 1} position{'s' if window != 2 else ''} back, and padding are set to −∞, so a token can only "
            f"attend to itself and the {window - 1} position{'s' if window != 2 else ''} before it. The grey band is "
            "the window's edge, not the end of the text."),
        "attn.hook_pattern": (
            "attention weights", r"A_{ij} = \frac{e^{S'_{ij}}}{\sum_k e^{S'_{ik}}}",
            "Softmax over each row turns scores into weights that are positive and sum to 1; masked cells get "
            "exactly 0."),
        "attn.hook_z": (
            "weighted values", r"Z_h = A_h V_h",
            "Each position's output for a head is the weighted average of the value vectors it attends to."),
        "hook_attn_out": (
            "attention output",
            r"\mathrm{attn}(x) = \mathrm{concat}(Z_1, \dots, Z_H)\,W_O" + (r" + b_O" if cfg.attn_proj_bias else ""),
            "The heads' outputs laid side by side and projected back to the residual width."),
        "hook_resid_mid": (
            "residual after attention",
            r"x_{\mathrm{mid}} = x_{\mathrm{pre}} + \mathrm{attn}(\mathrm{LN}_1(x_{\mathrm{pre}}))" if pre
            else r"x_{\mathrm{mid}} = \mathrm{LN}_1(x_{\mathrm{pre}} + \mathrm{attn}(x_{\mathrm{pre}}))",
            "Attention's output is added to the residual stream; the stream carries everything forward."
            if pre else "Attention's output is added to the residual stream and the sum is normalised (post-norm)."),
        "mlp.hook_pre": (
            "MLP pre-activation",
            r"h = \mathrm{LN}_2(x_{\mathrm{mid}})\,W_{fc}" + (r" + b_{fc}" if cfg.bias else "") if pre
            else r"h = x_{\mathrm{mid}}\,W_{fc}" + (r" + b_{fc}" if cfg.bias else ""),
            f"Each position's vector is widened to {cfg.d_mlp} hidden units, each a learned detector."),
        "mlp.hook_post": (
            "MLP activation", act_tex,
            "The non-linearity: it lets each hidden unit switch on for some inputs and (almost) off for others."),
        "mlp.hook_pre_linear": (
            "MLP up projection", r"u = \mathrm{LN}_2(x)\,W_{in}" + (r" + b_{in}" if cfg.bias else ""),
            f"A gated MLP's second projection to {cfg.d_mlp} hidden units: no activation; the gate scales it."),
        "hook_mlp_out": (
            "MLP output", r"\mathrm{mlp}(x) = \mathrm{act}(h)\,W_{proj}" + (r" + b_{proj}" if cfg.bias else ""),
            "The hidden units projected back to the residual width."),
        "hook_resid_post": (
            "residual after MLP",
            r"x_{\mathrm{post}} = x_{\mathrm{mid}} + \mathrm{mlp}(\mathrm{LN}_2(x_{\mathrm{mid}}))" if pre
            else r"x_{\mathrm{post}} = \mathrm{LN}_2(x_{\mathrm{mid}} + \mathrm{mlp}(x_{\mathrm{mid}}))",
            "The MLP's output is added to the residual stream: this is the layer's output."
            if pre else "The MLP's output is added to the residual stream and the sum is normalised: the layer's "
                        "output."),
        "hook_logits": (
            "logits", (r"\mathrm{logits} = \mathrm{LN}_f(x^{(L)})\,W_U" if pre else r"\mathrm{logits} = x^{(L)}\,W_U")
            + (r" + b_U" if cfg.head_bias else "") + (r",\quad W_U = W_E^{\top}" if tied else ""),
            "A score for every token in the vocabulary at every position: higher means the model thinks it comes next."
            + (" The head reuses the token embedding table." if tied else "")),
        "hook_probs": (
            "probabilities", r"p_{t,v} = \frac{e^{\mathrm{logit}_{t,v}}}{\sum_u e^{\mathrm{logit}_{t,u}}}",
            "Softmax over the vocabulary turns each position's logits into a probability for every possible "
            "next token."),
        "hook_loss_per_token": (
            "loss per token", r"\ell_t = -\log p_{t, y_t}",
            "The surprise at each position: minus the log of the probability given to the true next token "
            "(0 where there is no target)."),
        "hook_loss": (
            "loss", r"\mathcal{L} = \frac{1}{N}\sum_{t:\,y_t \ne -100} \ell_t",
            "The cross-entropy loss: the mean surprise over every position that has a target."),
    }
    if cfg.gated_mlp:  # Llama's SwiGLU: a gate through the activation times a plain projection
        x_ln = r"\mathrm{LN}_2(x)"
        table["mlp.hook_pre"] = (
            "MLP gate", rf"g = {x_ln}\,W_{{gate}}" + (r" + b_{gate}" if cfg.bias else ""),
            f"The gate: one of the gated MLP's two projections to {cfg.d_mlp} hidden units, before its activation.")
        table["mlp.hook_post"] = (
            "gate × up", r"h = \mathrm{" + {"gelu_tanh": "GELU", "silu": "SiLU"}.get(cfg.activation,
                                                  cfg.activation.upper() if cfg.activation != "tanh" else "tanh")
            + r"}(g) \odot u",
            "Each hidden unit is the activated gate times the up projection: the gate decides how much of u "
            "passes (SwiGLU when the activation is SiLU).")
        table["hook_mlp_out"] = (
            "MLP output", r"\mathrm{mlp}(x) = (\mathrm{act}(g) \odot u)\,W_{out}" + (r" + b_{out}" if cfg.bias else ""),
            "The gated hidden units projected back to the residual width.")
    if cfg.parallel_attn:  # GPT-NeoX: attention and MLP both read the block's input
        table["hook_resid_mid"] = (
            "input + attention",
            r"x_{\mathrm{mid}} = x_{\mathrm{pre}} + \mathrm{attn}(\mathrm{LN}_1(x_{\mathrm{pre}}))",
            "Attention's output added to the block's input. In this parallel block the MLP does not read it: it "
            "reads the block's input too, so this is a partial sum on the way to the layer's output.")
        table["mlp.hook_pre"] = (table["mlp.hook_pre"][0], table["mlp.hook_pre"][1].replace(
            r"x_{\mathrm{mid}}", r"x_{\mathrm{pre}}"), table["mlp.hook_pre"][2] + " In this parallel block the MLP "
            "reads the block's input, beside attention, not attention's result.")
        table["hook_resid_post"] = (
            "residual after the block", r"x_{\mathrm{post}} = x_{\mathrm{pre}} + \mathrm{attn}(\mathrm{LN}_1("
            r"x_{\mathrm{pre}})) + \mathrm{mlp}(\mathrm{LN}_2(x_{\mathrm{pre}}))",
            "Attention and the MLP, side by side, both added to the block's input (GPT-NeoX's parallel block): the "
            "layer's output.")
    later_models_words(table, layer, cfg)  # Gemma 2 and 3, OLMo 2: their norms, scale, caps and QK-norm
    return table.get(rest)


def _describe_seq2seq(rest: str, layer: Optional[int], cfg: ModelConfig, stack: str):
    """Steps of an encoder-decoder model (``gptviz.model.encoder_decoder``) that differ from, or are not in, GPT's."""
    pre = cfg.norm_placement == "pre"
    hs = cfg.d_head
    qb = (lambda w: rf" + b_{{{w}}}") if cfg.qkv_bias else (lambda w: "")
    enc = stack == "encoder"
    real_encoder = cfg.n_enc_layer > 0
    positions = cfg.pos_encoding in ("learned", "sinusoidal")
    src_text = ("the encoder's output" if real_encoder else
                "the encoder output (here a fixed random tensor standing in for an encoder)")
    x_in = r"\mathrm{LN}_1(x_{\mathrm{pre}})" if pre else r"x_{\mathrm{pre}}"
    x_mid_in = r"\mathrm{LN}_c(x_{\mathrm{mid}})" if pre else r"x_{\mathrm{mid}}"
    x_cross = r"x_{\mathrm{cross}}"
    table = {
        # ---- the encoder's input and output
        "hook_enc_embed": (
            "Encoder token embedding", r"E^{\mathrm{enc}}_{b,s} = W_E[\mathrm{src}_{b,s}]",
            "Each source token id picks its row of the embedding table, the same table the decoder uses."),
        "hook_enc_pos_embed": (
            "Encoder position embedding",
            r"P^{\mathrm{enc}}_{s} = W_P^{\mathrm{enc}}[s]" if cfg.pos_encoding == "learned" else
            r"P_{s,2i} = \sin\!\bigl(s / 10000^{2i/d}\bigr),\; P_{s,2i+1} = \cos\!\bigl(s / 10000^{2i/d}\bigr)",
            "Each source position gets its own vector, so the encoder can tell the first letter from the last."),
        "hook_enc_out": (
            "encoder output", (r"\mathrm{enc} = \mathrm{LN}_{f,\mathrm{enc}}(x^{(L_{\mathrm{enc}})})" if pre else
             r"\mathrm{enc} = x^{(L_{\mathrm{enc}})}") if real_encoder else
            r"\mathrm{enc} \sim \mathcal{N}(0, 1)^{B \times %d \times %d}"
            r"\ \text{(fixed, seeded)}" % (cfg.enc_len, cfg.n_embd),
            ("The encoder's last residual stream: one vector per source position. Every decoder layer's "
             "cross-attention reads its keys and values from it." if real_encoder else
             "A fixed random tensor, one vector per encoder position, standing in for an encoder's output: "
             "every decoder layer's cross-attention reads its keys and values from it.")),
        # ---- cross-attention: queries from the decoder, keys and values from the encoder output
        "cross_attn.hook_q": (
            "cross Q per head", rf"Q^c = {x_mid_in}\,W^c_Q" + qb("Q"),
            "The decoder's queries for cross-attention, split into heads: what each output position looks for "
            "in the source."),
        "cross_attn.hook_k": (
            "cross K per head", r"K^c = \mathrm{enc}\,W^c_K" + qb("K"),
            f"Keys made from {src_text}, split into heads: what each source position offers to be found by."),
        "cross_attn.hook_v": (
            "cross V per head", r"V^c = \mathrm{enc}\,W^c_V" + qb("V"),
            f"Values made from {src_text}, split into heads: what each source position hands on when attended to."),
        "cross_attn.hook_scores_raw": (
            "cross scores QKᵀ", r"S^c_h = Q^c_h (K^c_h)^{\top}",
            "Every output position's query dotted with every source position's key: a T × S grid, not a square."),
        "cross_attn.hook_scores_scaled": (
            "cross scores ÷ √d_head", rf"S^c_h / \sqrt{{{hs}}}",
            f"The cross-attention scores divided by √{hs}, as in self-attention."),
        "cross_attn.hook_attn_scores": (
            "cross masked scores", r"S'^c_{is} = \begin{cases} S^c_{is}/\sqrt{d_{head}} & "
            r"\text{source position } s \text{ is not padding} \\ -\infty & \text{otherwise} \end{cases}",
            "No causal mask here: every output position may look at every source position (only source padding "
            "is set to −∞)."),
        "cross_attn.hook_pattern": (
            "cross-attention weights", r"A^c_{is} = \frac{e^{S'^c_{is}}}{\sum_{s'} e^{S'^c_{is'}}}",
            "Softmax over the source positions: for each output position, how much it takes from each source "
            "position."),
        "cross_attn.hook_z": (
            "cross weighted values", r"Z^c_h = A^c_h V^c_h",
            "Each output position's result for a head: the weighted average of the source positions' values."),
        "hook_cross_out": (
            "cross-attention output", r"\mathrm{cross}(x, \mathrm{enc}) = \mathrm{concat}(Z^c_1, \dots, Z^c_H)\,W^c_O"
            + (r" + b^c_O" if cfg.attn_proj_bias else ""),
            "The cross-attention heads' outputs side by side, projected back to the residual width."),
        "hook_resid_cross": (
            "residual after cross-attention",
            rf"{x_cross} = x_{{\mathrm{{mid}}}} + "
            rf"\mathrm{{cross}}(\mathrm{{LN}}_c(x_{{\mathrm{{mid}}}}), \mathrm{{enc}})" if pre
            else rf"{x_cross} = "
                 rf"\mathrm{{LN}}_c(x_{{\mathrm{{mid}}}} + \mathrm{{cross}}(x_{{\mathrm{{mid}}}}, \mathrm{{enc}}))",
            "Cross-attention's output is added to the residual stream: what the decoder read from the source."
            if pre else "Cross-attention's output is added to the residual stream and the sum is normalised "
                        "(post-norm)."),
        # ---- GPT's steps, as they read in an encoder-decoder model
        "attn.hook_q": (
            "Q per head", rf"Q = {x_in}\,W_Q" + qb("Q"),
            "The queries, made by their own projection and split into heads: what each position is looking for."),
        "attn.hook_k": (
            "K per head", rf"K = {x_in}\,W_K" + qb("K"),
            "The keys, split into heads: what each position offers to be found by."),
        "attn.hook_v": (
            "V per head", rf"V = {x_in}\,W_V" + qb("V"),
            "The values, split into heads: what each position hands on when it is attended to."),
        "hook_attn_out": (
            "attention output",
            r"\mathrm{attn}(x) = \mathrm{concat}(Z_1, \dots, Z_H)\,W_O" + (r" + b_O" if cfg.attn_proj_bias else ""),
            "The heads' outputs laid side by side and projected back to the residual width."),
    }
    if enc:
        table["attn.hook_attn_scores"] = (
            "masked scores", r"S'_{ij} = \begin{cases} S_{ij}/\sqrt{d_{head}} & \text{key } j \text{ is not padding} "
            r"\\ -\infty & \text{otherwise} \end{cases}",
            "The encoder has no causal mask: every source position may look at every other one (only padding is −∞).")
        if layer == 0:
            table["hook_resid_pre"] = (
                "encoder residual stream in",
                r"x^{(0)} = E^{\mathrm{enc}} + P^{\mathrm{enc}}" if positions else r"x^{(0)} = E^{\mathrm{enc}}",
                "The residual stream entering the encoder's first layer: the source tokens' embeddings"
                + (" plus their positions." if positions else "."))
    else:  # the decoder's MLP comes after cross-attention
        table["mlp.hook_pre"] = (
            "MLP pre-activation", (rf"h = \mathrm{{LN}}_2({x_cross})\,W_{{fc}}" if pre else rf"h = {x_cross}\,W_{{fc}}")
            + (r" + b_{fc}" if cfg.bias else ""),
            f"Each position's vector, after cross-attention, is widened to {cfg.d_mlp} hidden units.")
        table["hook_resid_post"] = (
            "residual after MLP",
            rf"x_{{\mathrm{{post}}}} = {x_cross} + \mathrm{{mlp}}(\mathrm{{LN}}_2({x_cross}))" if pre
            else rf"x_{{\mathrm{{post}}}} = \mathrm{{LN}}_2({x_cross} + \mathrm{{mlp}}({x_cross}))",
            "The MLP's output is added to the residual stream: this is the decoder layer's output."
            if pre else "The MLP's output is added to the residual stream and the sum is normalised: the decoder "
                        "layer's output.")
        if cfg.attn_only:
            table["hook_resid_post"] = (
                "layer output", rf"x_{{\mathrm{{post}}}} = {x_cross}",
                "This attention-only layer has no MLP: its output is the stream after cross-attention.")
    return table.get(rest)
