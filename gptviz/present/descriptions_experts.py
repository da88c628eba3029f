"""The words for a mixture of experts' steps (``gptviz.model.experts``) and an attention sink's: title, formula and
sentence, as ``gptviz.present.descriptions`` gives every other step. Kept apart so that file stays readable."""
from __future__ import annotations

from typing import Optional

from ..config import ModelConfig
from ..config_moe import GLU_OSS


def expert_words(rest: str, layer: Optional[int], cfg: ModelConfig) -> Optional[tuple[str, str, str]]:
    """``(title, formula, explanation)`` of a mixture's or a sink's step (``rest``: the name without "blocks.L."),
    or None for any other step."""
    if rest == "attn.hook_sink":
        return ("sink weight", r"A_{i,\mathrm{sink}} = \frac{e^{s_h}}{e^{s_h} + \sum_k e^{S'_{ik}}}",
                "Each head has a learned logit s_h, a key with no value that every query sees: its share of the "
                "softmax is the weight no token gets, so a row of the attention weights sums to less than 1.")
    if not cfg.n_expert or layer is None or not cfg.is_moe_layer(layer):
        return None
    E, k = cfg.n_expert, cfg.n_expert_active
    bias = r" + b_r" if cfg.router_bias else ""
    renorm = cfg.expert_renorm
    unit = (r"(\mathrm{clamp}(u, \pm L) + 1)\, g'\sigma(\alpha g')" if cfg.activation == GLU_OSS
            else r"\mathrm{act}(g) \odot u" if cfg.gated_mlp else r"\mathrm{act}(x W_{in})")
    shared = r" + \sigma(x\,w_s)\,\mathrm{shared}(x)" if cfg.d_shared_expert else ""
    words = {
        "mlp.hook_router_logits": (
            "router logits", rf"r = \mathrm{{LN}}_2(x)\,W_r{bias},\quad W_r \in \mathbb{{R}}^{{d \times {E}}}",
            f"The router scores each of the {E} experts for each token: one logit per expert (−∞ for an expert "
            "switched off)."),
        "mlp.hook_router_probs": (
            "router probabilities", r"p_e = \frac{e^{r_e}}{\sum_{e'} e^{r_{e'}}}",
            f"Softmax over the {E} experts: how strongly the router wants each expert for this token."),
        "mlp.hook_expert_weights": (
            "chosen experts' weights",
            (r"w_e = \frac{p_e}{\sum_{e' \in \mathrm{top}" + str(k) + r"} p_{e'}}" if renorm else r"w_e = p_e")
            + r"\ \text{for } e \in \mathrm{top}" + str(k) + r"(p),\ 0 \text{ otherwise}",
            f"Each token goes to the {k} expert{'s' if k > 1 else ''} with the highest probability; "
            + ("their probabilities are rescaled to sum to 1. " if renorm else "each keeps its probability. ")
            + "Every other expert gets weight 0 and never runs on that token."),
        "mlp.hook_expert_out": (
            "each chosen expert's output", rf"y_e = \bigl({unit}\bigr) W_{{out}}^{{(e)}}",
            f"Each expert is an MLP of its own ({cfg.d_expert} hidden units), run only on the tokens routed to it; "
            "0 where it was not chosen."),
        "mlp.hook_shared_gate": (
            "shared expert's gate", r"\gamma = \sigma(\mathrm{LN}_2(x)\,w_s)",
            "A sigmoid gate, between 0 and 1, on the shared expert every token goes through."),
        "mlp.hook_shared_out": (
            "shared expert's output", r"\gamma\,\mathrm{shared}(x)",
            f"The shared expert ({cfg.d_shared_expert} hidden units), run on every token, scaled by its gate."),
        "hook_mlp_out": (
            "mixture's output", rf"\mathrm{{moe}}(x) = \sum_e w_e\,y_e{shared}",
            "The chosen experts' outputs weighted by their router weights and added"
            + (", plus the gated shared expert." if cfg.d_shared_expert else ".")),
    }
    return words.get(rest)
