"""The words for the steps Gemma 2, Gemma 3 and OLMo 2 add or change (``gptviz.present.descriptions`` calls
``later_models_words`` on its table): norms after the sublayers (``ln1_post``, ``ln2_post``), scores scaled by
√query_pre_attn_scalar, soft-capped scores and logits, and OLMo 2's QK-norm over the whole projection.
"""
from __future__ import annotations

from typing import Optional

from ..config import ModelConfig


def later_models_words(table: dict, layer: Optional[int], cfg: ModelConfig) -> None:
    """Add to (or change in) ``table`` (rest of a hook name -> (title, formula, sentence)) the words of the steps
    this config's later-model choices add or change; a config without them is left as it is."""
    both, after = cfg.sublayer_norms == "both", cfg.sublayer_norms == "after"
    if both or after:
        a_in = r"\mathrm{LN}_1(x_{\mathrm{pre}})" if both else r"x_{\mathrm{pre}}"
        m_in = r"\mathrm{LN}_2(x_{\mathrm{mid}})" if both else r"x_{\mathrm{mid}}"
        where = ("both before and after each sublayer (Gemma 2 and 3)" if both
                 else "after each sublayer only (OLMo 2): the sublayer reads the raw stream")
        table["hook_attn_out"] = (
            "attention output (normalised)",
            r"\mathrm{attn}(x) = \mathrm{LN}_1^{\mathrm{post}}\bigl(\mathrm{concat}(Z_1, \dots, Z_H)\,W_O\bigr)",
            f"The heads' outputs projected back to the residual width, then normalised by LN₁ post (norms {where}): "
            "what attention adds to the stream has a size set by that norm's gains, whatever the heads computed.")
        table["hook_resid_mid"] = (
            "residual after attention",
            r"x_{\mathrm{mid}} = x_{\mathrm{pre}} + \mathrm{LN}_1^{\mathrm{post}}(\mathrm{attn}(" + a_in + "))",
            "Attention's normalised output is added to the residual stream; the stream itself is never normalised.")
        table["hook_mlp_out"] = (
            "MLP output (normalised)",
            r"\mathrm{mlp}(x) = \mathrm{LN}_2^{\mathrm{post}}\bigl((\mathrm{act}(g) \odot u)\,W_{out}\bigr)",
            "The gated hidden units projected back to the residual width, then normalised by LN₂ post.")
        table["hook_resid_post"] = (
            "residual after MLP",
            r"x_{\mathrm{post}} = x_{\mathrm{mid}} + \mathrm{LN}_2^{\mathrm{post}}(\mathrm{mlp}(" + m_in + "))",
            "The MLP's normalised output is added to the residual stream: this is the layer's output.")
    if after:  # no norm before the sublayers: they read the stream itself
        title, formula, words = table["attn.hook_qkv"]
        table["attn.hook_qkv"] = (title, formula.replace(r"\mathrm{LN}_1(x)", "x"),
                                  words + " It reads the residual stream itself: this model has no norm before "
                                          "attention (its norm comes after).")
        for step in ("mlp.hook_pre", "mlp.hook_pre_linear"):
            title, formula, words = table[step]
            table[step] = (title, formula.replace(r"\mathrm{LN}_2(x)", r"x_{\mathrm{mid}}"), words
                           + " It reads the residual stream itself (no norm before the MLP).")
    scaled = r"S_{ij}/\sqrt{d_{head}}"
    if cfg.attn_scale_dim is not None:  # Gemma: query_pre_attn_scalar
        s = f"{cfg.attn_scale_dim:g}"
        table["attn.hook_scores_scaled"] = (
            "scores ÷ √query_pre_attn_scalar", rf"S_h / \sqrt{{s_q}} = S_h / \sqrt{{{s}}}",
            f"The scores divided by √{s}: Gemma's query_pre_attn_scalar, a number of its own, "
            + ("equal to the head width here." if cfg.attn_scale_dim == cfg.d_head
               else f"not the head width ({cfg.d_head}): the softmax is that much softer or sharper than √d_head "
                    "would make it."))
        scaled = rf"S_{{ij}}/\sqrt{{{s}}}"
    if cfg.attn_softcap is not None:
        c = f"{cfg.attn_softcap:g}"
        table["attn.hook_scores_capped"] = (
            "scores soft-capped", rf"\tilde{{S}}_{{ij}} = {c}\,\tanh\!\bigl({scaled} \,/\, {c}\bigr)",
            f"Soft-capping: each scaled score goes through {c} · tanh(score / {c}), so none gets past ±{c}. Small "
            f"scores pass almost unchanged (tanh is nearly straight near 0); large ones flatten towards ±{c}, so no "
            "single key can take all of a head's attention by a huge score. It comes before the mask.")
        scaled = r"\tilde{S}_{ij}"
    if scaled != r"S_{ij}/\sqrt{d_{head}}" and "attn.hook_attn_scores" in table:
        title, formula, words = table["attn.hook_attn_scores"]
        table["attn.hook_attn_scores"] = (title, formula.replace(r"S_{ij}/\sqrt{d_{head}}", scaled), words)
    if cfg.final_softcap is not None:
        c = f"{cfg.final_softcap:g}"
        table["hook_logits_raw"] = (
            "logits before the cap", r"z = \mathrm{LN}_f(x^{(L)})\,W_U",
            "The unembedding's own output: a score for every token of the vocabulary, before the soft cap.")
        table["hook_logits"] = (
            "logits (soft-capped)", rf"\mathrm{{logits}} = {c}\,\tanh(z / {c})",
            f"The unembedding's scores through {c} · tanh(z / {c}): none gets past ±{c}, so the model can't be "
            "arbitrarily sure of a token. The probabilities and the loss read these.")
    if cfg.qk_norm and cfg.qk_norm_full:  # OLMo 2: one norm over each whole projection, then the heads
        for which, width, gain in (("q", cfg.d_attn, "Q"), ("k", cfg.d_kv, "K")):
            table[f"attn.hook_{which}_normed"] = (
                f"{which.upper()} normalised over all heads (QK-norm)",
                rf"\hat{{{which}}}_t = \gamma_{gain} \odot {which}_t \,/\, "
                rf"\sqrt{{\tfrac{{1}}{{{width}}}\textstyle\sum_i {which}_{{t,i}}^2 + \epsilon}}",
                f"OLMo 2's QK-norm: all of a position's {'queries' if which == 'q' else 'keys'} ({width} numbers, "
                "every head side by side) divided by their one root mean square, times a learned gain of that "
                "width; then split into heads, as shown. One head's size is not set on its own: it is its share "
                "of the whole.")
