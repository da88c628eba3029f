"""What each recorded step means: axes, formula, explanation, the PyTorch line, and its kind of values.

Kept apart from the model so the model file stays as readable as nanoGPT's, and so the words can be
checked against the code by tests (every hook name the model has must be described here).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..config import ModelConfig

# How a step's values should be coloured.
SIGNED = "signed"  # any real number: a diverging scale centred on 0
NONNEGATIVE = "nonnegative"  # 0 and up (a norm's divisor, a loss)
PROBABILITY = "probability"  # 0 to 1
MASKED = "masked"  # signed, with -inf where attention may not look

BTC = ("batch", "pos", "d_model")
BTHD = ("batch", "pos", "head", "d_head")
BHQK = ("batch", "head", "query_pos", "key_pos")
# encoder-decoder models (gptviz.model.encoder_decoder): cross-attention's keys and values run over the encoder's positions
BSHD = ("batch", "enc_pos", "head", "d_head")
BHQS = ("batch", "head", "query_pos", "enc_pos")


@dataclass(frozen=True)
class StepInfo:
    name: str  # the hook name, e.g. "blocks.0.attn.hook_pattern"
    title: str  # a short label for a menu
    stage: str  # embed | attention | mlp | residual | norm | output | loss
    layer: Optional[int]
    axes: tuple[str, ...]
    formula: str  # LaTeX, for st.latex
    explanation: str  # one plain-English sentence
    code: str  # the PyTorch line that computes it
    kind: str  # SIGNED | NONNEGATIVE | PROBABILITY | MASKED
    stack: str = "decoder"  # "encoder" for an encoder-decoder model's encoder steps (enc_blocks.*, hook_enc_*)

    @property
    def signed(self) -> bool:
        return self.kind in (SIGNED, MASKED)

    @property
    def probability(self) -> bool:
        return self.kind == PROBABILITY

    @property
    def masked(self) -> bool:
        return self.kind == MASKED


_LAYER = re.compile(r"^blocks\.(\d+)\.(.+)$")
_ENC_LAYER = re.compile(r"^enc_blocks\.(\d+)\.(.+)$")


def _norm_info(name: str, which: str, layer: Optional[int], part: str, cfg: ModelConfig, stack: str = "decoder") -> tuple:
    label = {"ln1": "LN₁", "ln2": "LN₂", "ln_final": "final norm", "ln_cross": "LN cross",
             "enc_ln_final": "encoder final norm"}[which]
    tex = {"ln1": r"\mathrm{LN}_1", "ln2": r"\mathrm{LN}_2", "ln_final": r"\mathrm{LN}_f",
           "ln_cross": r"\mathrm{LN}_c", "enc_ln_final": r"\mathrm{LN}_{f,\mathrm{enc}}"}[which]
    mid = r"x_{\mathrm{cross}}" if cfg.n_enc_layer >= 0 and stack == "decoder" else r"x_{\mathrm{mid}}"
    if which in ("ln_final", "enc_ln_final"):
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
                   if layer_norm else rf"\mathrm{{rms}} = \sqrt{{\tfrac{{1}}{{d}}\textstyle\sum_i x_i^2 + \epsilon}},\quad x = {source}")
        return (f"{label} divisor", (*BTC[:2], "scale"), formula,
                ("The size of each position's vector in " + where + ": its standard deviation" if layer_norm
                 else "The root mean square of each position's vector in " + where)
                + ", which the norm divides by.",
                "scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # (B, T, 1)", NONNEGATIVE)
    if part == "hook_normalized":
        formula = r"\hat{x} = \frac{x - \mu}{\sigma}" if layer_norm else r"\hat{x} = \frac{x}{\mathrm{rms}}"
        return (f"{label} normalised", BTC, formula,
                "Each position's vector " + ("centred and " if layer_norm else "") + "scaled to unit size, before the learned weight"
                + (" and shift." if cfg.bias else "."),
                "x = x / scale  # (B, T, C)", SIGNED)
    formula = rf"{tex}(x) = \gamma \odot \hat{{x}}{shift}"
    return (f"{label} output", BTC, formula,
            "The normalised vector times the learned per-dimension weight γ" + (" plus the shift β." if cfg.bias else "."),
            "x = x * self.weight" + (" + self.bias" if cfg.bias else "") + "  # (B, T, C)", SIGNED)


def describe(name: str, cfg: ModelConfig) -> StepInfo:
    """The StepInfo for a hook name in a model of this config. Unknown names raise ValueError."""
    stack = "decoder"
    m = _LAYER.match(name)
    if m is None and cfg.n_enc_layer > 0:
        m = _ENC_LAYER.match(name)
        stack = "encoder" if m else stack
    layer, rest = (int(m.group(1)), m.group(2)) if m else (None, name)
    if layer is None and (rest.startswith("hook_enc_") or rest.startswith("enc_ln_final.")):
        stack = "encoder"
    info = _describe(rest, layer, cfg, stack) if cfg.n_enc_layer >= 0 else _describe(rest, layer, cfg)
    if info is None:
        raise ValueError(f"{name!r} is not a step gptviz knows")
    title, stage, axes, formula, explanation, code, kind = info
    if stack == "encoder":  # the encoder's steps run over source positions
        axes = tuple("enc_pos" if a == "pos" else a for a in axes)
    if layer is not None:
        title = f"{'enc ' if stack == 'encoder' else ''}L{layer} {title}"
    return StepInfo(name, title, stage, layer, axes, formula, explanation, code, kind, stack)


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
    hs = cfg.d_head
    tied = cfg.tie_weights
    norm_parts = re.match(r"^(ln1|ln2|ln_cross|ln_final|enc_ln_final)\.(hook_scale|hook_normalized|hook_out)$", rest)
    if norm_parts:
        which, part = norm_parts.groups()
        title, axes, formula, expl, code, kind = _norm_info(rest, which, layer, part, cfg, stack)
        return title, "norm", axes, formula, expl, code, kind
    act_tex = {
        "gelu": r"\mathrm{GELU}(h) = h\,\Phi(h)",
        "gelu_tanh": r"\mathrm{GELU}(h) \approx \tfrac{h}{2}\bigl(1 + \tanh\bigl(\sqrt{2/\pi}\,(h + 0.044715\,h^3)\bigr)\bigr)",
        "relu": r"\mathrm{ReLU}(h) = \max(0, h)",
        "tanh": r"\tanh(h) = \frac{e^{h} - e^{-h}}{e^{h} + e^{-h}}",
    }[cfg.activation]
    act_code = {
        "gelu": "h = F.gelu(h)",
        "gelu_tanh": 'h = F.gelu(h, approximate="tanh")',
        "relu": "h = F.relu(h)",
        "tanh": "h = torch.tanh(h)",
    }[cfg.activation]
    pre = cfg.norm_placement == "pre"
    table = {
        "hook_embed": (
            "Token embedding", "embed", BTC, r"E_{b,t} = W_E[x_{b,t}] = \mathrm{onehot}(x_{b,t})\,W_E",
            "Each token id picks its row of the embedding table W_E, which is the same as multiplying a one-hot vector by W_E.",
            "tok = self.transformer.wte(idx)  # (B, T, C)", SIGNED),
        "hook_pos_embed": (
            "Position embedding", "embed", BTC,
            r"P_{t} = W_P[t]" if cfg.pos_encoding == "learned" else
            r"P_{t,2i} = \sin\!\bigl(t / 10000^{2i/d}\bigr),\; P_{t,2i+1} = \cos\!\bigl(t / 10000^{2i/d}\bigr)",
            "Each position picks its row of the learned position table W_P, so the model can tell places apart."
            if cfg.pos_encoding == "learned" else
            "Each position gets a fixed pattern of sines and cosines at many wavelengths, so the model can tell places apart.",
            "pos = self.transformer.wpe(torch.arange(T))  # (T, C)" if cfg.pos_encoding == "learned"
            else "pos = self.pos_table[:T]  # (T, C), fixed sin/cos", SIGNED),
        "hook_resid_pre": (
            "residual stream in", "residual", BTC,
            (r"x^{(0)} = E + P" if cfg.pos_encoding in ("learned", "sinusoidal") else r"x^{(0)} = E")
            if layer == 0 else rf"x^{{({layer})}}_{{\mathrm{{pre}}}} = x^{{({layer - 1 if layer else 0})}}_{{\mathrm{{post}}}}",
            ("The residual stream entering the first layer: " + (
                "token embedding plus position embedding." if cfg.pos_encoding in ("learned", "sinusoidal")
                else "the token embedding alone (positions enter inside attention)." if cfg.pos_encoding == "rope"
                else "the token embedding alone (this model has no position signal but the causal mask).")
             ) if layer == 0 else "The residual stream entering this layer: the previous layer's output.",
            "x = tok + pos  # (B, T, C)" if layer == 0 and cfg.pos_encoding in ("learned", "sinusoidal")
            else "x = tok  # (B, T, C)" if layer == 0 else "x = block(x)  # (B, T, C)", SIGNED),
        "attn.hook_qkv": (
            "QKV projection", "attention", ("batch", "pos", "qkv"),
            r"[Q\;K\;V] = \mathrm{LN}_1(x)\,W_{QKV}" + (r" + b_{QKV}" if cfg.qkv_bias else "") if pre
            else r"[Q\;K\;V] = x\,W_{QKV}" + (r" + b_{QKV}" if cfg.qkv_bias else ""),
            f"One matrix multiply makes every head's query, key and value at once: 3 × {cfg.n_head} heads × {hs} numbers per position.",
            "qkv = self.c_attn(x)  # (B, T, 3 * nh * hs)", SIGNED),
        "attn.hook_q": (
            "Q per head", "attention", BTHD, r"Q_h = [Q\;K\;V]_{:,\,h d_h : (h+1) d_h}",
            "The query block split into heads: what each position is looking for, one vector per head.",
            "q = q.view(B, T, nh, hs)  # (B, T, nh, hs)", SIGNED),
        "attn.hook_k": (
            "K per head", "attention", BTHD, r"K_h = [Q\;K\;V]_{:,\,d + h d_h : d + (h+1) d_h}",
            "The key block split into heads: what each position offers to be found by, one vector per head.",
            "k = k.view(B, T, nh, hs)  # (B, T, nh, hs)", SIGNED),
        "attn.hook_v": (
            "V per head", "attention", BTHD, r"V_h = [Q\;K\;V]_{:,\,2d + h d_h : 2d + (h+1) d_h}",
            "The value block split into heads: what each position hands on when it is attended to.",
            "v = v.view(B, T, nh, hs)  # (B, T, nh, hs)", SIGNED),
        "attn.hook_rot_q": (
            "Q rotated (RoPE)", "attention", BTHD,
            r"\tilde{q}_{t,i} = q_{t,i}\cos t\theta_i - q_{t,i+d/2}\sin t\theta_i,\;"
            r"\tilde{q}_{t,i+d/2} = q_{t,i+d/2}\cos t\theta_i + q_{t,i}\sin t\theta_i,\; \theta_i = b^{-2i/d}",
            "Each pair of query dimensions is turned by an angle that grows with the position, so scores depend on relative distance.",
            "q = apply_rope(q, cos, sin)  # (B, T, nh, hs)", SIGNED),
        "attn.hook_rot_k": (
            "K rotated (RoPE)", "attention", BTHD,
            r"\tilde{k}_{t,i} = k_{t,i}\cos t\theta_i - k_{t,i+d/2}\sin t\theta_i,\;"
            r"\tilde{k}_{t,i+d/2} = k_{t,i+d/2}\cos t\theta_i + k_{t,i}\sin t\theta_i",
            "Each pair of key dimensions is turned by the same position-dependent angles as the queries.",
            "k = apply_rope(k, cos, sin)  # (B, T, nh, hs)", SIGNED),
        "attn.hook_scores_raw": (
            "scores QKᵀ", "attention", BHQK, r"S_h = Q_h K_h^{\top}",
            "Every query dotted with every key: how well what position i looks for matches what position j offers.",
            "att = q @ k.transpose(-2, -1)  # (B, nh, T, T)", SIGNED),
        "attn.hook_scores_scaled": (
            "scores ÷ √d_head", "attention", BHQK, rf"S_h / \sqrt{{d_{{head}}}} = S_h / \sqrt{{{hs}}}",
            f"The scores divided by √{hs} so that their spread does not grow with the head width and the softmax stays soft.",
            "att = att / math.sqrt(hs)", SIGNED),
        "attn.hook_attn_scores": (
            "masked scores", "attention", BHQK,
            r"S'_{ij} = \begin{cases} S_{ij}/\sqrt{d_{head}} & j \le i \text{ and key } j \text{ is not padding} \\ -\infty & \text{otherwise} \end{cases}",
            "Future positions (and padding) are set to −∞, so a token can only attend to itself and what came before.",
            'att = att.masked_fill(~allowed, float("-inf"))', MASKED),
        "attn.hook_pattern": (
            "attention weights", "attention", BHQK, r"A_{ij} = \frac{e^{S'_{ij}}}{\sum_k e^{S'_{ik}}}",
            "Softmax over each row turns scores into weights that are positive and sum to 1; masked cells get exactly 0.",
            "att = F.softmax(att, dim=-1)  # (B, nh, T, T)", PROBABILITY),
        "attn.hook_z": (
            "weighted values", "attention", BTHD, r"Z_h = A_h V_h",
            "Each position's output for a head is the weighted average of the value vectors it attends to.",
            "y = att @ v  # (B, nh, T, hs)", SIGNED),
        "hook_attn_out": (
            "attention output", "attention", BTC,
            r"\mathrm{attn}(x) = \mathrm{concat}(Z_1, \dots, Z_H)\,W_O" + (r" + b_O" if cfg.attn_proj_bias else ""),
            "The heads' outputs laid side by side and projected back to the residual width.",
            "y = self.c_proj(y.transpose(1, 2).reshape(B, T, nh * hs))  # (B, T, C)", SIGNED),
        "hook_resid_mid": (
            "residual after attention", "residual", BTC,
            r"x_{\mathrm{mid}} = x_{\mathrm{pre}} + \mathrm{attn}(\mathrm{LN}_1(x_{\mathrm{pre}}))" if pre
            else r"x_{\mathrm{mid}} = \mathrm{LN}_1(x_{\mathrm{pre}} + \mathrm{attn}(x_{\mathrm{pre}}))",
            "Attention's output is added to the residual stream; the stream carries everything forward."
            if pre else "Attention's output is added to the residual stream and the sum is normalised (post-norm).",
            "x = x + self.attn(self.ln_1(x))" if pre else "x = self.ln_1(x + self.attn(x))", SIGNED),
        "mlp.hook_pre": (
            "MLP pre-activation", "mlp", ("batch", "pos", "d_mlp"),
            r"h = \mathrm{LN}_2(x_{\mathrm{mid}})\,W_{fc}" + (r" + b_{fc}" if cfg.bias else "") if pre
            else r"h = x_{\mathrm{mid}}\,W_{fc}" + (r" + b_{fc}" if cfg.bias else ""),
            f"Each position's vector is widened to {cfg.d_mlp} hidden units, each a learned detector.",
            "h = self.c_fc(x)  # (B, T, d_mlp)", SIGNED),
        "mlp.hook_post": (
            "MLP activation", "mlp", ("batch", "pos", "d_mlp"), act_tex,
            "The non-linearity: it lets each hidden unit switch on for some inputs and (almost) off for others.",
            act_code, SIGNED),
        "hook_mlp_out": (
            "MLP output", "mlp", BTC, r"\mathrm{mlp}(x) = \mathrm{act}(h)\,W_{proj}" + (r" + b_{proj}" if cfg.bias else ""),
            "The hidden units projected back to the residual width.",
            "x = self.c_proj(h)  # (B, T, C)", SIGNED),
        "hook_resid_post": (
            "residual after MLP", "residual", BTC,
            r"x_{\mathrm{post}} = x_{\mathrm{mid}} + \mathrm{mlp}(\mathrm{LN}_2(x_{\mathrm{mid}}))" if pre
            else r"x_{\mathrm{post}} = \mathrm{LN}_2(x_{\mathrm{mid}} + \mathrm{mlp}(x_{\mathrm{mid}}))",
            "The MLP's output is added to the residual stream: this is the layer's output."
            if pre else "The MLP's output is added to the residual stream and the sum is normalised: the layer's output.",
            "x = x + self.mlp(self.ln_2(x))" if pre else "x = self.ln_2(x + self.mlp(x))", SIGNED),
        "hook_logits": (
            "logits", "output", ("batch", "pos", "vocab"),
            (r"\mathrm{logits} = \mathrm{LN}_f(x^{(L)})\,W_U" if pre else r"\mathrm{logits} = x^{(L)}\,W_U")
            + (r" + b_U" if cfg.head_bias else "") + (r",\quad W_U = W_E^{\top}" if tied else ""),
            "A score for every token in the vocabulary at every position: higher means the model thinks it comes next."
            + (" The head reuses the token embedding table." if tied else ""),
            "logits = self.lm_head(x)  # (B, T, vocab)", SIGNED),
        "hook_probs": (
            "probabilities", "loss", ("batch", "pos", "vocab"), r"p_{t,v} = \frac{e^{\mathrm{logit}_{t,v}}}{\sum_u e^{\mathrm{logit}_{t,u}}}",
            "Softmax over the vocabulary turns each position's logits into a probability for every possible next token.",
            "probs = F.softmax(logits, dim=-1)  # (B, T, vocab)", PROBABILITY),
        "hook_loss_per_token": (
            "loss per token", "loss", ("batch", "pos"), r"\ell_t = -\log p_{t, y_t}",
            "The surprise at each position: minus the log of the probability given to the true next token (0 where there is no target).",
            "loss_t = -log_probs.gather(-1, y[..., None])[..., 0]  # (B, T)", NONNEGATIVE),
        "hook_loss": (
            "loss", "loss", (), r"\mathcal{L} = \frac{1}{N}\sum_{t:\,y_t \ne -100} \ell_t",
            "The cross-entropy loss: the mean surprise over every position that has a target.",
            "loss = F.cross_entropy(logits.view(-1, V), y.view(-1), ignore_index=-100)", NONNEGATIVE),
    }
    return table.get(rest)


def _describe_seq2seq(rest: str, layer: Optional[int], cfg: ModelConfig, stack: str):
    """Steps of an encoder-decoder model (``gptviz.model.encoder_decoder``) that differ from, or are not in, GPT's."""
    pre = cfg.norm_placement == "pre"
    hs = cfg.d_head
    qb = (lambda w: rf" + b_{{{w}}}") if cfg.qkv_bias else (lambda w: "")  # noqa: E731
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
            "Encoder token embedding", "embed", ("batch", "enc_pos", "d_model"),
            r"E^{\mathrm{enc}}_{b,s} = W_E[\mathrm{src}_{b,s}]",
            "Each source token id picks its row of the embedding table, the same table the decoder uses.",
            "x = self.transformer.wte(enc_input)  # (B, S, C)", SIGNED),
        "hook_enc_pos_embed": (
            "Encoder position embedding", "embed", ("batch", "enc_pos", "d_model"),
            r"P^{\mathrm{enc}}_{s} = W_P^{\mathrm{enc}}[s]" if cfg.pos_encoding == "learned" else
            r"P_{s,2i} = \sin\!\bigl(s / 10000^{2i/d}\bigr),\; P_{s,2i+1} = \cos\!\bigl(s / 10000^{2i/d}\bigr)",
            "Each source position gets its own vector, so the encoder can tell the first letter from the last.",
            "pos = self.encoder.wpe(torch.arange(S))  # (S, C)" if cfg.pos_encoding == "learned"
            else "pos = self.pos_table[:S]  # (S, C), fixed sin/cos", SIGNED),
        "hook_enc_out": (
            "encoder output", "encoder", ("batch", "enc_pos", "d_model"),
            (r"\mathrm{enc} = \mathrm{LN}_{f,\mathrm{enc}}(x^{(L_{\mathrm{enc}})})" if pre else
             r"\mathrm{enc} = x^{(L_{\mathrm{enc}})}") if real_encoder else
            r"\mathrm{enc} \sim \mathcal{N}(0, 1)^{B \times %d \times %d}\ \text{(fixed, seeded)}" % (cfg.enc_len, cfg.n_embd),
            ("The encoder's last residual stream: one vector per source position. Every decoder layer's "
             "cross-attention reads its keys and values from it." if real_encoder else
             "A fixed random tensor, one vector per encoder position, standing in for an encoder's output: "
             "every decoder layer's cross-attention reads its keys and values from it."),
            "enc = self.encoder.ln_f(x)  # (B, S, C)" if real_encoder and pre else
            "enc = x  # (B, S, C)" if real_encoder else
            "enc = torch.randn(B, S, C, generator=g)  # fixed, seeded", SIGNED),
        # ---- cross-attention: queries from the decoder, keys and values from the encoder output
        "cross_attn.hook_q": (
            "cross Q per head", "cross_attention", BTHD, rf"Q^c = {x_mid_in}\,W^c_Q" + qb("Q"),
            "The decoder's queries for cross-attention, split into heads: what each output position looks for in the source.",
            "q = self.q_proj(x).view(B, T, nh, hs)  # (B, T, nh, hs)", SIGNED),
        "cross_attn.hook_k": (
            "cross K per head", "cross_attention", BSHD, r"K^c = \mathrm{enc}\,W^c_K" + qb("K"),
            f"Keys made from {src_text}, split into heads: what each source position offers to be found by.",
            "k = self.k_proj(enc).view(B, S, nh, hs)  # (B, S, nh, hs)", SIGNED),
        "cross_attn.hook_v": (
            "cross V per head", "cross_attention", BSHD, r"V^c = \mathrm{enc}\,W^c_V" + qb("V"),
            f"Values made from {src_text}, split into heads: what each source position hands on when attended to.",
            "v = self.v_proj(enc).view(B, S, nh, hs)  # (B, S, nh, hs)", SIGNED),
        "cross_attn.hook_scores_raw": (
            "cross scores QKᵀ", "cross_attention", BHQS, r"S^c_h = Q^c_h (K^c_h)^{\top}",
            "Every output position's query dotted with every source position's key: a T × S grid, not a square.",
            "att = q @ k.transpose(-2, -1)  # (B, nh, T, S)", SIGNED),
        "cross_attn.hook_scores_scaled": (
            "cross scores ÷ √d_head", "cross_attention", BHQS, rf"S^c_h / \sqrt{{{hs}}}",
            f"The cross-attention scores divided by √{hs}, as in self-attention.",
            "att = att / math.sqrt(hs)", SIGNED),
        "cross_attn.hook_attn_scores": (
            "cross masked scores", "cross_attention", BHQS,
            r"S'^c_{is} = \begin{cases} S^c_{is}/\sqrt{d_{head}} & \text{source position } s \text{ is not padding} \\ -\infty & \text{otherwise} \end{cases}",
            "No causal mask here: every output position may look at every source position (only source padding is set to −∞).",
            'att = att.masked_fill(~allowed, float("-inf"))  # allowed: source padding only', MASKED),
        "cross_attn.hook_pattern": (
            "cross-attention weights", "cross_attention", BHQS, r"A^c_{is} = \frac{e^{S'^c_{is}}}{\sum_{s'} e^{S'^c_{is'}}}",
            "Softmax over the source positions: for each output position, how much it takes from each source position.",
            "att = F.softmax(att, dim=-1)  # (B, nh, T, S)", PROBABILITY),
        "cross_attn.hook_z": (
            "cross weighted values", "cross_attention", BTHD, r"Z^c_h = A^c_h V^c_h",
            "Each output position's result for a head: the weighted average of the source positions' values.",
            "z = att @ v  # (B, nh, T, hs)", SIGNED),
        "hook_cross_out": (
            "cross-attention output", "cross_attention", BTC,
            r"\mathrm{cross}(x, \mathrm{enc}) = \mathrm{concat}(Z^c_1, \dots, Z^c_H)\,W^c_O"
            + (r" + b^c_O" if cfg.attn_proj_bias else ""),
            "The cross-attention heads' outputs side by side, projected back to the residual width.",
            "c = self.o_proj(z.transpose(1, 2).reshape(B, T, nh * hs))  # (B, T, C)", SIGNED),
        "hook_resid_cross": (
            "residual after cross-attention", "residual", BTC,
            rf"{x_cross} = x_{{\mathrm{{mid}}}} + \mathrm{{cross}}(\mathrm{{LN}}_c(x_{{\mathrm{{mid}}}}), \mathrm{{enc}})" if pre
            else rf"{x_cross} = \mathrm{{LN}}_c(x_{{\mathrm{{mid}}}} + \mathrm{{cross}}(x_{{\mathrm{{mid}}}}, \mathrm{{enc}}))",
            "Cross-attention's output is added to the residual stream: what the decoder read from the source."
            if pre else "Cross-attention's output is added to the residual stream and the sum is normalised (post-norm).",
            "x = x + self.cross_attn(self.ln_cross(x), enc)" if pre else "x = self.ln_cross(x + self.cross_attn(x, enc))",
            SIGNED),
        # ---- GPT's steps, as they read in an encoder-decoder model
        "attn.hook_q": (
            "Q per head", "attention", BTHD, rf"Q = {x_in}\,W_Q" + qb("Q"),
            "The queries, made by their own projection and split into heads: what each position is looking for.",
            "q = self.q_proj(x).view(B, T, nh, hs)  # (B, T, nh, hs)", SIGNED),
        "attn.hook_k": (
            "K per head", "attention", BTHD, rf"K = {x_in}\,W_K" + qb("K"),
            "The keys, split into heads: what each position offers to be found by.",
            "k = self.k_proj(x).view(B, T, nh, hs)  # (B, T, nh, hs)", SIGNED),
        "attn.hook_v": (
            "V per head", "attention", BTHD, rf"V = {x_in}\,W_V" + qb("V"),
            "The values, split into heads: what each position hands on when it is attended to.",
            "v = self.v_proj(x).view(B, T, nh, hs)  # (B, T, nh, hs)", SIGNED),
        "hook_attn_out": (
            "attention output", "attention", BTC,
            r"\mathrm{attn}(x) = \mathrm{concat}(Z_1, \dots, Z_H)\,W_O" + (r" + b_O" if cfg.attn_proj_bias else ""),
            "The heads' outputs laid side by side and projected back to the residual width.",
            "a = self.o_proj(z.transpose(1, 2).reshape(B, T, nh * hs))  # (B, T, C)", SIGNED),
    }
    if enc:
        table["attn.hook_attn_scores"] = (
            "masked scores", "attention", BHQK,
            r"S'_{ij} = \begin{cases} S_{ij}/\sqrt{d_{head}} & \text{key } j \text{ is not padding} \\ -\infty & \text{otherwise} \end{cases}",
            "The encoder has no causal mask: every source position may look at every other one (only padding is −∞).",
            'att = att.masked_fill(~allowed, float("-inf"))  # allowed: padding only', MASKED)
        if layer == 0:
            table["hook_resid_pre"] = (
                "encoder residual stream in", "residual", ("batch", "enc_pos", "d_model"),
                r"x^{(0)} = E^{\mathrm{enc}} + P^{\mathrm{enc}}" if positions else r"x^{(0)} = E^{\mathrm{enc}}",
                "The residual stream entering the encoder's first layer: the source tokens' embeddings"
                + (" plus their positions." if positions else "."),
                "x = tok + pos  # (B, S, C)" if positions else "x = tok  # (B, S, C)", SIGNED)
    else:  # the decoder's MLP comes after cross-attention
        table["mlp.hook_pre"] = (
            "MLP pre-activation", "mlp", ("batch", "pos", "d_mlp"),
            (rf"h = \mathrm{{LN}}_2({x_cross})\,W_{{fc}}" if pre else rf"h = {x_cross}\,W_{{fc}}")
            + (r" + b_{fc}" if cfg.bias else ""),
            f"Each position's vector, after cross-attention, is widened to {cfg.d_mlp} hidden units.",
            "h = self.c_fc(x)  # (B, T, d_mlp)", SIGNED)
        table["hook_resid_post"] = (
            "residual after MLP", "residual", BTC,
            rf"x_{{\mathrm{{post}}}} = {x_cross} + \mathrm{{mlp}}(\mathrm{{LN}}_2({x_cross}))" if pre
            else rf"x_{{\mathrm{{post}}}} = \mathrm{{LN}}_2({x_cross} + \mathrm{{mlp}}({x_cross}))",
            "The MLP's output is added to the residual stream: this is the decoder layer's output."
            if pre else "The MLP's output is added to the residual stream and the sum is normalised: the decoder layer's output.",
            "x = x + self.mlp(self.ln_2(x))" if pre else "x = self.ln_2(x + self.mlp(x))", SIGNED)
        if cfg.attn_only:
            table["hook_resid_post"] = (
                "layer output", "residual", BTC, rf"x_{{\mathrm{{post}}}} = {x_cross}",
                "This attention-only layer has no MLP: its output is the stream after cross-attention.",
                "return x", SIGNED)
    return table.get(rest)
