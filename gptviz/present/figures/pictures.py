"""Pictures that are not Plotly charts: tokens as coloured HTML chips, the model as a pipeline (Graphviz or HTML)."""
from __future__ import annotations

import html
from typing import Optional, Sequence

from ...config import ModelConfig

_CHIP_COLORS = ["#ffd6a5", "#caffbf", "#9bf6ff", "#bdb2ff", "#ffc6ff", "#fdffb6", "#a0c4ff", "#ffadad"]


def token_chips_html(labels: Sequence[str], ids: Sequence[Optional[int]], pad_from: Optional[int] = None,
                     unknown: bool = False) -> str:
    """Tokens as coloured chips with their ids underneath. Colours follow the id, so repeats match.
    ``unknown``: characters with no token (left out of the input), as white chips crossed out in red, no id."""
    out = ['<div style="display:flex;flex-wrap:wrap;gap:6px;font-size:20px;line-height:1.2">']
    for i, (lab, tid) in enumerate(zip(labels, ids)):
        pad = pad_from is not None and i >= pad_from
        if unknown:
            bg, border, under, title = "#ffffff", "2px dashed #c62828", "no id", "not in the vocabulary: left out"
        else:
            bg = "#e0e0e0" if pad else _CHIP_COLORS[int(tid) % len(_CHIP_COLORS)]
            border = "2px dashed #888" if pad else "1px solid #999"
            under, title = f'{int(tid)}{" pad" if pad else ""}', f"position {i}, id {int(tid)}"
        strike = "text-decoration:line-through;text-decoration-color:#c62828;" if unknown else ""
        out.append(
            f'<span title="{title}" style="background:{bg};border:{border};border-radius:6px;'
            f'padding:4px 8px;color:#111;display:inline-flex;flex-direction:column;align-items:center">'
            f'<span style="white-space:pre;{strike}">{html.escape(lab)}</span>'
            f'<span style="font-size:13px;color:#444">{under}</span></span>'
        )
    out.append("</div>")
    return "".join(out)


def architecture_parts(cfg: ModelConfig, B: int, T: int) -> list[dict]:
    """The model as a pipeline of boxes, top to bottom: each {"lines", "fill", "edge"} where ``edge`` is the
    live tensor shape on the arrow into the box (and ``side`` a box feeding in from the side)."""
    C, V, H, D, M, L = cfg.n_embd, cfg.vocab_size, cfg.n_head, cfg.d_head, cfg.d_mlp, cfg.n_layer
    pre = cfg.norm_placement == "pre"
    norm = "LayerNorm" if cfg.norm == "layernorm" else "RMSNorm"
    pos = {"learned": f"wpe: learned [{cfg.block_size}×{C}]", "sinusoidal": f"sin/cos table [{cfg.block_size}×{C}]",
           "rope": "RoPE (inside attention)", "none": "no position signal"}[cfg.pos_encoding]
    act = {"gelu": "GELU", "gelu_tanh": "GELU (tanh)", "relu": "ReLU", "tanh": "tanh", "silu": "SiLU",
           "gpt_oss_glu": "clamped SwiGLU"}[cfg.activation]
    KV = cfg.n_kv_head
    parts = [dict(lines=["token ids x", f"[B={B} × T={T}]"], fill="#fff3d6", edge=None),
             dict(lines=["wte: token embedding", f"[V={V} × C={C}]"], fill="#eef3fb", edge=None)]
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        parts.append(dict(lines=["+"], fill="#eef3fb", edge=f"[{B}×{T}×{C}]", side=(pos, f"[{T}×{C}]")))
    before, after = cfg.sublayer_norms in ("before", "both"), cfg.sublayer_norms in ("both", "after")
    attn_in = f"{norm} ln_1 → " if pre and before else ""
    mlp_in = f"{norm} ln_2 → " if pre and before else ""
    attn_out, mlp_out = (f" → {norm} ln_1_post", f" → {norm} ln_2_post") if after else ("", "")  # Gemma 2/3, OLMo 2
    kv = "" if KV == H else f" ({KV} key/value head{'s' if KV > 1 else ''}, each shared by {H // KV})"
    block = [f"× {L} block{'s' if L > 1 else ''}" + (" (attention and MLP side by side)" if cfg.parallel_attn else ""),
             f"{attn_in}attention: {H} head{'s' if H > 1 else ''} × d_head={D}{kv}",
             f"QKV [{B}×{T}×{(H + 2 * KV) * D}] → scores [{B}×{H}×{T}×{T}] → z [{B}×{T}×{H * D}]{attn_out}"
             " → + residual"
             + ("" if pre else f" → {norm} ln_1")]
    if cfg.sliding_window is not None:  # a mask on the scores, not a shorter context
        where = "every layer" if cfg.sliding_layers is None else \
            "layer" + ("s " if len(cfg.sliding_layers) != 1 else " ") + ", ".join(map(str, cfg.sliding_layers))
        block.insert(2, f"sliding window: each query sees its last {cfg.sliding_window} positions ({where})")
    if cfg.attn_sinks:  # GPT-OSS
        block.insert(2, "attention sinks: a learned logit per head, a key every query sees that has no value")
    if cfg.attn_softcap is not None or cfg.attn_scale_dim is not None:  # Gemma 2 and 3
        block.insert(2, "scores ÷ √" + (f"{cfg.attn_scale_dim:g}" if cfg.attn_scale_dim is not None else f"{D}")
                     + (f", soft-capped: {cfg.attn_softcap:g}·tanh(s/{cfg.attn_softcap:g})"
                        if cfg.attn_softcap is not None else ""))
    if cfg.rope_local_base is not None:  # Gemma 3: the sliding layers turn with their own base
        block.insert(2, f"RoPE base {cfg.rope_local_base:g} on the sliding layers, {cfg.rope_base:g} on the others")
    if cfg.qk_norm:  # QK-norm (Qwen3): each head's q and k through an RMSNorm of its own
        block.insert(2, (f"QK-norm: all of q and all of k RMS-normalised (gains of {H * D} and {KV * D})"
                         if cfg.qk_norm_full else f"QK-norm: each head's q and k RMS-normalised (gains of d_head={D})")
                     + (", before RoPE" if cfg.pos_encoding == "rope" else ""))
    mlp = (f"{mlp_in}gated MLP: {act}({C} → {M}) × ({C} → {M}) → {C}" if cfg.gated_mlp
           else f"{mlp_in}MLP: {C} → {M} ({act}) → {C}")
    if cfg.n_expert:  # a mixture of experts in place of the MLP (on every layer, or on those moe_layers lists)
        where = "" if cfg.moe_layers is None else " on layers " + ", ".join(map(str, cfg.moe_layers))
        shared = f" + a shared expert ({C} → {cfg.d_shared_expert} → {C})" if cfg.d_shared_expert else ""
        mlp = (f"{mlp_in}router ({C} → {cfg.n_expert}) → top-{cfg.n_expert_active} of {cfg.n_expert} experts "
               f"({C} → {cfg.d_expert} → {C}, {act}){shared}{where}")
    block.append("(attention only: no MLP)" if cfg.attn_only else
                 f"{mlp}{mlp_out} → + residual" + ("" if pre else f" → {norm} ln_2"))
    parts.append(dict(lines=block, fill="#e8f5e9", edge=f"[{B}×{T}×{C}]"))
    if pre:
        parts.append(dict(lines=[f"{norm} ln_f"], fill="#eef3fb", edge=f"[{B}×{T}×{C}]"))
    tied = " (tied to wte)" if cfg.tie_weights else ""
    parts.append(dict(lines=[f"lm_head{tied}", f"[C={C} × V={V}]"], fill="#eef3fb", edge=f"[{B}×{T}×{C}]"))
    if cfg.final_softcap is not None:  # Gemma 2: the logits squashed into ±cap
        c = cfg.final_softcap
        parts.append(dict(lines=[f"soft-cap: {c:g}·tanh(logits/{c:g})"], fill="#eef3fb", edge=f"[{B}×{T}×{V}]"))
    parts.append(dict(lines=["softmax → cross-entropy loss"], fill="#fdecea", edge=f"logits [{B}×{T}×{V}]"))
    return parts


def architecture_dot(cfg: ModelConfig, B: int, T: int) -> str:
    """The model as a Graphviz pipeline, each arrow labelled with the live tensor shape."""
    lines = ["digraph G {", "rankdir=TB; node [shape=box, style=\"rounded,filled\", fontsize=14, fontname=Helvetica];",
             "edge [fontsize=12, fontname=Helvetica];"]
    for i, p in enumerate(architecture_parts(cfg, B, T)):
        label = "\\n".join(p["lines"])
        shape = ", shape=circle" if p["lines"] == ["+"] else ""
        lines.append(f'n{i} [label="{label}", fillcolor="{p["fill"]}"{shape}];')
        if i:
            lines.append(f"n{i - 1} -> n{i}" + (f' [label="{p["edge"]}"]' if p["edge"] else "") + ";")
        if p.get("side"):
            lines += [f's{i} [label="{p["side"][0]}", fillcolor="#eef3fb"];', f's{i} -> n{i} [label="{p["side"][1]}"];']
    return "\n".join(lines + ["}"])


def architecture_html(cfg: ModelConfig, B: int, T: int) -> str:
    """The same pipeline as HTML boxes and arrows: quick for a browser to draw (no layout engine)."""
    out = ['<div style="display:flex;flex-direction:column;align-items:center;gap:0;font-size:17px;'
           'line-height:1.35;font-family:sans-serif">']
    for p in architecture_parts(cfg, B, T):
        if p["edge"] is not None or len(out) > 1:
            label = html.escape(p["edge"] or "")
            out.append('<div style="display:flex;flex-direction:column;align-items:center;color:#555;font-size:14px">'
                       f'<div style="width:2px;height:14px;background:#555"></div>{label}'
                       '<div style="width:0;height:0;border-left:7px solid transparent;border-right:7px solid '
                       'transparent;border-top:9px solid #555"></div></div>')
        side = ""
        if p.get("side"):
            side = (f'<div style="border:1px solid #999;border-radius:10px;background:#eef3fb;padding:6px 12px;'
                    f'margin-right:10px">{html.escape(p["side"][0])}</div><span style="color:#555;font-size:14px;'
                    f'margin-right:10px">{html.escape(p["side"][1])} →</span>')
        body = "<br>".join(html.escape(x) for x in p["lines"])
        out.append(f'<div style="display:flex;align-items:center">{side}<div style="border:1px solid #999;'
                   f'border-radius:12px;background:{p["fill"]};padding:8px 16px;text-align:center">{body}</div></div>')
    out.append("</div>")
    return "".join(out)

