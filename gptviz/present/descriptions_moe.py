"""The words for a mixture of experts' steps (the router's logits and probabilities, the chosen experts' weights,
each expert's output, the shared expert, their sum) and for GPT-OSS's attention sink: a title, a formula and one
sentence each. ``gptviz.present.descriptions`` asks here first; the facts of each step are in
``gptviz.run.step_meta``."""
from __future__ import annotations

from typing import Optional

from ..config import ModelConfig
from ..config_moe import GLU_OSS


def _expert_tex(cfg: ModelConfig) -> str:
    """One expert's map, as LaTeX."""
    if cfg.activation == GLU_OSS:
        return r"\mathrm{expert}_e(x) = \bigl((\mathrm{clamp}(x W^e_{up}) + 1)\odot g'\sigma(\alpha g')\bigr)W^e_{down}"
    if cfg.gated_mlp:
        return r"\mathrm{expert}_e(x) = \bigl(\mathrm{act}(x W^e_{gate}) \odot x W^e_{up}\bigr)\,W^e_{down}"
    return r"\mathrm{expert}_e(x) = \mathrm{act}(x W^e_{fc})\,W^e_{proj}"


def moe_words(rest: str, layer: Optional[int], cfg: ModelConfig) -> Optional[tuple[str, str, str]]:
    """(title, formula, sentence) for a step of a mixture-of-experts layer or an attention sink, else None (the
    other steps' words are in ``descriptions``)."""
    if rest == "attn.hook_sink":
        return ("attention sink's weight",
                r"a_{i,\mathrm{sink}} = \frac{e^{s_h}}{e^{s_h} + \sum_j e^{S'_{ij}}}",
                "Each head has one learned sink logit s_h, a key with no value that every query sees: the weight "
                "it takes is weight the real keys do not get, so a row of attention weights may sum to less "
                "than 1.")
    if layer is None or not getattr(cfg, "n_expert", 0) or not cfg.is_moe_layer(layer):
        return None
    E, k = cfg.n_expert, cfg.n_expert_active
    x = r"\mathrm{LN}_2(x)" if cfg.norm_placement == "pre" else "x"
    bias = r" + b_r" if cfg.router_bias else ""
    if cfg.expert_renorm:
        weight_tex = (r"w_e = \begin{cases} p_e / \sum_{j \in \mathrm{top}" + str(k) + r"} p_j & e \in \mathrm{top}"
                      + str(k) + r"(p) \\ 0 & \text{otherwise} \end{cases}")
        renorm = "renormalised to sum to 1"
    else:
        weight_tex = (r"w_e = \begin{cases} p_e & e \in \mathrm{top}" + str(k)
                      + r"(p) \\ 0 & \text{otherwise} \end{cases}")
        renorm = "as they are (not renormalised)"
    shared = r" + g\,\mathrm{shared}(x)" if cfg.d_shared_expert else ""
    table = {
        "mlp.hook_router_logits": (
            "router logits", rf"r = {x}\,W_r^{{\top}}{bias}",
            f"The router scores each of the {E} experts for every token: one number per expert, a linear map of "
            "the token's vector. An expert switched off gets −∞."),
        "mlp.hook_router_probs": (
            "router probabilities", r"p_e = \frac{e^{r_e}}{\sum_j e^{r_j}}",
            "Softmax over the experts: how much the router favours each expert for this token; each row sums "
            "to 1."),
        "mlp.hook_expert_weights": (
            "chosen experts' weights", weight_tex,
            f"Each token goes to the {k} experts of highest probability, whose probabilities, {renorm}, are "
            "their weights; every other expert gets 0 and does not run on that token."),
        "mlp.hook_expert_out": (
            "each chosen expert's output", _expert_tex(cfg),
            f"Each expert is a small MLP of its own ({cfg.d_expert} hidden units) that runs only on the tokens "
            "routed to it, so its output is 0 where it was not chosen."),
        "mlp.hook_shared_gate": (
            "shared expert's gate", r"g = \sigma(x\,W_g)",
            "A sigmoid gate per token, between 0 and 1, that scales the shared expert every token goes to."),
        "mlp.hook_shared_out": (
            "shared expert's output", r"g\,\mathrm{shared}(x)",
            f"The shared expert, a gated MLP of {cfg.d_shared_expert} hidden units that every token goes to, "
            "times its gate."),
        "hook_mlp_out": (
            "mixture-of-experts output", r"\mathrm{moe}(x) = \sum_e w_e\,\mathrm{expert}_e(x)" + shared,
            "The chosen experts' outputs times their weights, added up"
            + (", plus the gated shared expert" if cfg.d_shared_expert else "") + ": the block's MLP output."),
    }
    return table.get(rest)
