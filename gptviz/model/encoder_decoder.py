"""An encoder-decoder transformer beside GPT: a decoder whose blocks also attend to an encoder's output.

Each decoder block has three sublayers, as in "Attention Is All You Need": masked self-attention,
cross-attention (queries from the decoder, keys and values from the encoder output, no causal mask) and
the MLP. With ``norm_placement="post"`` each is followed by ``LayerNorm(x + sublayer(x))``; with "pre"
it is ``x + sublayer(LayerNorm(x))``.

``config.n_enc_layer`` says where the encoder output comes from:

- ``0``: there is no encoder; the output is a fixed, seeded random tensor (batch, enc_len, n_embd), or
  the ``enc_out`` you pass. This is the teaching material's set-up (preset ``decoder-cross-attention``).
- ``1`` or more: a real encoder of that many blocks (bidirectional self-attention and an MLP) reads the
  token ids ``enc_input`` (batch, enc_pos). It shares the decoder's token embedding.

Every attention here has separate ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` linear layers; the
heads' arithmetic is GPT's own (``HeadsAttention.attend``), so every step is recorded the same way.
Hook names: the decoder's as GPT's (``blocks.{l}.attn.*``, without ``hook_qkv``), plus
``blocks.{l}.ln_cross.*``, ``blocks.{l}.cross_attn.hook_q|hook_k|...|hook_z``, ``blocks.{l}.hook_cross_out``
and ``blocks.{l}.hook_resid_cross``; the encoder's ``hook_enc_embed``, ``hook_enc_pos_embed``,
``enc_blocks.{l}.*``, ``enc_ln_final.*``; and ``hook_enc_out``, the tensor cross-attention reads.

Also here: ``build_model`` (GPT or Seq2Seq by ``n_enc_layer``), the reversal task's training
(``train_reverse``, run by ``python -m gptviz.train --task reverse``) and the material's own training
loop (``material_recipe``).
"""
from __future__ import annotations

import math
import sys
import time
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .gpt import GPT, MLP, HeadsAttention, HookPoint, Norm, Recorder, rope_angles, sinusoidal_table, sublayer


def build_model(config: ModelConfig):
    """The model a config describes: a decoder-only ``GPT`` (n_enc_layer = -1) or an encoder-decoder ``Seq2Seq``."""
    return GPT(config) if config.n_enc_layer < 0 else Seq2Seq(config)


class Attention(HeadsAttention):
    """Multi-head attention with separate Q, K, V and O projections.

    ``forward(x, kv, ...)``: queries from ``x`` (B, T, C), keys and values from ``kv`` (B, S, C). Self-attention
    passes the same tensor twice; cross-attention passes the encoder output as ``kv`` (and never rotates).
    """

    def __init__(self, config: ModelConfig, prefix: str, cross: bool = False):
        rope = config.pos_encoding == "rope" and not cross
        steps = tuple(s for s in HeadsAttention.STEPS if rope or not s.startswith("rot_"))
        super().__init__(config, prefix, steps)
        self.rope = rope
        C, D = config.n_embd, config.d_attn
        self.q_proj = nn.Linear(C, D, bias=config.qkv_bias)
        self.k_proj = nn.Linear(C, D, bias=config.qkv_bias)
        self.v_proj = nn.Linear(C, D, bias=config.qkv_bias)
        self.o_proj = nn.Linear(D, C, bias=config.attn_proj_bias)

    def forward(self, x, kv, mask, rope_cs=None, rec: Recorder = None, train: bool = False):
        B, T, _ = x.shape
        z = self.attend(self.q_proj(x), self.k_proj(kv), self.v_proj(kv), mask, rope_cs, rec, train)  # (B, T, nh, hs)
        return self.o_proj(z.reshape(B, T, self.d_attn))  # (B, T, C)


def _drop(x, p: float, train: bool):
    return F.dropout(x, p, training=True) if train and p > 0 else x


class EncoderBlock(nn.Module):
    """GPT's block without the causal mask, hooked as ``enc_blocks.{l}.*``."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        p = f"enc_blocks.{layer}."
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = config.dropout
        self.attn_only = config.attn_only
        self.ln_1 = Norm(config, p + "ln1")
        self.attn = Attention(config, p + "attn.")
        if not self.attn_only:
            self.ln_2 = Norm(config, p + "ln2")
            self.mlp = MLP(config, layer, prefix=p + "mlp")
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint(p + f"hook_{name}"))

    def forward(self, x, mask, rope_cs, rec: Recorder = None, train: bool = False):
        x = self.hook_resid_pre(x, rec)
        x = sublayer(self, x, lambda h: self.attn(h, h, mask, rope_cs, rec, train), self.ln_1, self.hook_attn_out,
                     self.hook_resid_mid, rec, train)
        if self.attn_only:
            return self.hook_resid_post(x, rec)
        return sublayer(self, x, lambda h: self.mlp(h, rec), self.ln_2, self.hook_mlp_out, self.hook_resid_post,
                        rec, train)


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, MLP; a residual and a norm around each.

    Modules are registered in the teaching material's order (the three sublayers, then the three norms), so
    the parameter table reads like its printout: ``attn``, ``cross_attn``, ``mlp``, ``ln_1``, ``ln_cross``, ``ln_2``.
    ``ln_1`` belongs to self-attention and ``ln_2`` to the MLP, as in GPT's blocks.
    """

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        p = f"blocks.{layer}."
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = config.dropout
        self.attn_only = config.attn_only
        self.attn = Attention(config, p + "attn.")
        self.cross_attn = Attention(config, p + "cross_attn.", cross=True)
        if not self.attn_only:
            self.mlp = MLP(config, layer)
        self.ln_1 = Norm(config, p + "ln1")
        self.ln_cross = Norm(config, p + "ln_cross")
        if not self.attn_only:
            self.ln_2 = Norm(config, p + "ln2")
        for name in ("resid_pre", "attn_out", "resid_mid", "cross_out", "resid_cross", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint(p + f"hook_{name}"))

    def forward(self, x, enc, mask, cross_mask, rope_cs, rec: Recorder = None, train: bool = False):
        # pre-norm: x = x + sublayer(norm(x)); the 2017 Transformer: x = norm(x + sublayer(x)), three times
        x = self.hook_resid_pre(x, rec)
        x = sublayer(self, x, lambda h: self.attn(h, h, mask, rope_cs, rec, train), self.ln_1, self.hook_attn_out,
                     self.hook_resid_mid, rec, train)
        x = sublayer(self, x, lambda h: self.cross_attn(h, enc, cross_mask, None, rec, train), self.ln_cross,
                     self.hook_cross_out, self.hook_resid_cross, rec, train)
        if self.attn_only:
            return self.hook_resid_post(x, rec)
        return sublayer(self, x, lambda h: self.mlp(h, rec), self.ln_2, self.hook_mlp_out, self.hook_resid_post,
                        rec, train)


class Seq2Seq(nn.Module):
    """An encoder-decoder transformer.

    ``forward(idx, targets=None, attention_mask=None, enc_input=None, enc_mask=None, enc_out=None)
    -> (logits, loss)``: ``idx`` (B, T) is what the decoder reads; ``enc_input`` (B, S) the source token ids
    (with a real encoder); ``enc_out`` (B, S, C) an encoder output to use instead of the fixed random one
    (n_enc_layer = 0); ``enc_mask`` (B, S) is 1 for real source positions and 0 for padding.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.n_enc_layer < 0:
            raise ValueError("n_enc_layer=-1 describes a decoder-only model: build it with GPT(config)")
        config.check_limits(batch=1, seq_len=1)
        self.config = config
        C = config.n_embd
        with torch.device("meta"):
            modules = dict(wte=nn.Embedding(config.vocab_size, C),
                           h=nn.ModuleList(DecoderBlock(config, i) for i in range(config.n_layer)))
            if config.pos_encoding == "learned":
                modules["wpe"] = nn.Embedding(config.block_size, C)
            if config.norm_placement == "pre":
                modules["ln_f"] = Norm(config, "ln_final")
            self.transformer = nn.ModuleDict(modules)
            if config.n_enc_layer > 0:
                enc = dict(h=nn.ModuleList(EncoderBlock(config, i) for i in range(config.n_enc_layer)))
                if config.pos_encoding == "learned":
                    enc["wpe"] = nn.Embedding(config.enc_len, C)
                if config.norm_placement == "pre":
                    enc["ln_f"] = Norm(config, "enc_ln_final")
                self.encoder = nn.ModuleDict(enc)
            self.lm_head = nn.Linear(C, config.vocab_size, bias=config.head_bias)
        self.to_empty(device="cpu")
        if config.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight
        for name in ("enc_embed", "enc_pos_embed", "enc_out", "embed", "pos_embed", "logits"):
            setattr(self, f"hook_{name}", HookPoint(f"hook_{name}"))
        n_pos = max(config.block_size, config.enc_len)
        if config.pos_encoding == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(n_pos, C), persistent=False)
        if config.pos_encoding == "rope":
            ang = rope_angles(n_pos, config.d_head, config.rope_base)
            self.register_buffer("rope_cos", ang.cos(), persistent=False)
            self.register_buffer("rope_sin", ang.sin(), persistent=False)
        self.register_buffer(
            "causal", torch.ones(config.block_size, config.block_size, dtype=torch.bool).tril(), persistent=False
        )
        self.reset_parameters(config.seed)
        self.eval()

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """GPT's initialisation (normal(0, init_std), biases 0, norm weights 1), from a generator seeded with ``seed``."""
        g = torch.Generator().manual_seed(seed)
        std = self.config.init_std
        n_resid = 3 * self.config.n_layer + 2 * max(0, self.config.n_enc_layer)  # residual branches
        for name, p in self.named_parameters():
            if name.rsplit(".", 1)[-1] == "bias":
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            elif name.endswith(("c_proj.weight", "o_proj.weight")):
                p.normal_(0.0, std / math.sqrt(n_resid), generator=g)
            else:
                p.normal_(0.0, std, generator=g)

    def fixed_enc_out(self, batch: int) -> torch.Tensor:
        """The stand-in encoder output when n_enc_layer = 0: standard normal, (batch, enc_len, n_embd).

        Seeded by the config's seed and drawn a row at a time, so row b is the same whatever the batch size."""
        cfg = self.config
        g = torch.Generator().manual_seed(cfg.seed + 1_000_003)
        return torch.stack([torch.randn(cfg.enc_len, cfg.n_embd, generator=g) for _ in range(batch)])

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def parameter_table(self) -> list[dict]:
        """One row per parameter tensor: name, shape, count. A tied head is listed with its partner."""
        return GPT.parameter_table(self)

    def hook_names(self) -> list[str]:
        return [m.name for m in self.modules() if isinstance(m, HookPoint)]

    # ------------------------------------------------------------------ inputs
    def check_inputs(self, idx, targets=None, attention_mask=None, enc_input=None, enc_mask=None, enc_out=None) -> None:
        GPT.check_inputs(self, idx, targets, attention_mask)  # the decoder's side: GPT's rules
        cfg = self.config
        B = idx.shape[0]
        if cfg.n_enc_layer > 0:
            if enc_out is not None:
                raise ValueError("this model has an encoder: pass its input token ids as enc_input, not enc_out")
            if enc_input is None:
                raise ValueError("this encoder-decoder model reads a source: pass enc_input, token ids (batch, enc_pos)")
            if not isinstance(enc_input, torch.Tensor) or enc_input.dim() != 2 or enc_input.dtype.is_floating_point:
                raise ValueError("enc_input must be a 2-D tensor of token ids, shape (batch, enc_pos)")
            S = enc_input.shape[1]
            if enc_input.shape[0] != B or S < 1:
                raise ValueError(f"enc_input has shape {tuple(enc_input.shape)}: it needs batch {B} and at least one token")
            lo, hi = int(enc_input.min()), int(enc_input.max())
            if lo < 0 or hi >= cfg.vocab_size:
                raise ValueError(f"source token id {lo if lo < 0 else hi} is outside the vocabulary (vocab_size={cfg.vocab_size})")
        else:
            if enc_input is not None:
                raise ValueError("this model has no encoder (n_enc_layer=0): pass an encoder output as enc_out, or nothing")
            if enc_out is None:
                S = cfg.enc_len
            else:
                if not isinstance(enc_out, torch.Tensor) or enc_out.dim() != 3 or not enc_out.dtype.is_floating_point:
                    raise ValueError("enc_out must be a float tensor of shape (batch, enc_pos, n_embd)")
                S = enc_out.shape[1]
                if enc_out.shape[0] != B or enc_out.shape[2] != cfg.n_embd or S < 1:
                    raise ValueError(f"enc_out has shape {tuple(enc_out.shape)}, not ({B}, enc_pos, {cfg.n_embd})")
        if S > cfg.enc_len:
            raise ValueError(f"source length {S} is longer than enc_len={cfg.enc_len}")
        if enc_mask is not None and tuple(enc_mask.shape) != (B, S):
            raise ValueError(f"enc_mask must have the shape of the source {(B, S)}, not {tuple(enc_mask.shape)}")

    def allowed_keys(self, T: int, attention_mask: Optional[torch.Tensor]):
        """The decoder's self-attention mask, as GPT's: causal, and not at padded keys."""
        return GPT.allowed_keys(self, T, attention_mask)

    @staticmethod
    def source_keys(S: int, enc_mask: Optional[torch.Tensor], T: int = 1):
        """``(allowed, dead)`` for attention over source positions: every one, except padding (no causal mask).
        allowed: (1 or B, 1, 1, S)."""
        if enc_mask is None:
            return torch.ones(1, 1, 1, S, dtype=torch.bool), None
        allowed = enc_mask.bool()[:, None, None, :]
        dead = ~allowed.any(dim=-1, keepdim=True)
        return allowed, (dead if bool(dead.any()) else None)

    # ------------------------------------------------------------------ forward
    def _positions(self, tok, table: Optional[nn.Embedding], hook: HookPoint, rec):
        cfg = self.config
        B, T, C = tok.shape
        if cfg.pos_encoding == "learned":
            return tok + hook(table(torch.arange(T, device=tok.device))[None].expand(B, T, C), rec)
        if cfg.pos_encoding == "sinusoidal":
            return tok + hook(self.pos_table[:T][None].expand(B, T, C), rec)
        return tok

    def _rope(self, T: int):
        return (self.rope_cos[:T], self.rope_sin[:T]) if self.config.pos_encoding == "rope" else None

    def encode(self, batch: int, enc_input=None, enc_mask=None, enc_out=None, rec: Recorder = None,
               train: bool = False) -> torch.Tensor:
        """The encoder output (B, S, C) that cross-attention reads, recorded as ``hook_enc_out``."""
        cfg = self.config
        if cfg.n_enc_layer == 0:
            mem = enc_out if enc_out is not None else self.fixed_enc_out(batch)
            return self.hook_enc_out(mem, rec)
        S = enc_input.shape[1]
        x = self.hook_enc_embed(self.transformer.wte(enc_input), rec)  # (B, S, C), the decoder's table
        x = _drop(self._positions(x, self.encoder["wpe"] if "wpe" in self.encoder else None, self.hook_enc_pos_embed, rec),
                  cfg.dropout, train)
        mask = self.source_keys(S, enc_mask)
        mask = (mask[0].expand(-1, -1, S, -1), mask[1])  # every source position sees every source position
        rope_cs = self._rope(S)
        for block in self.encoder.h:
            x = block(x, mask, rope_cs, rec, train)
        if "ln_f" in self.encoder:
            x = self.encoder.ln_f(x, rec)
        return self.hook_enc_out(x, rec)

    def run(self, idx, attention_mask=None, rec: Recorder = None, train: bool = False,
            enc_input=None, enc_mask=None, enc_out=None) -> torch.Tensor:
        """The forward pass to the logits. ``rec`` sees (and may replace) every hooked tensor."""
        B, T = idx.shape
        enc = self.encode(B, enc_input, enc_mask, enc_out, rec, train)  # (B, S, C)
        tok = self.hook_embed(self.transformer.wte(idx), rec)  # (B, T, C)
        x = _drop(self._positions(tok, self.transformer["wpe"] if "wpe" in self.transformer else None,
                                  self.hook_pos_embed, rec), self.config.dropout, train)
        mask = self.allowed_keys(T, attention_mask)
        cross_mask = self.source_keys(enc.shape[1], enc_mask)
        rope_cs = self._rope(T)
        for block in self.transformer.h:
            x = block(x, enc, mask, cross_mask, rope_cs, rec, train)
        if "ln_f" in self.transformer:
            x = self.transformer.ln_f(x, rec)
        return self.hook_logits(self.lm_head(x), rec)  # (B, T, vocab)

    def forward(self, idx, targets=None, attention_mask=None, enc_input=None, enc_mask=None, enc_out=None):
        self.check_inputs(idx, targets, attention_mask, enc_input, enc_mask, enc_out)
        logits = self.run(idx, attention_mask, train=self.training, enc_input=enc_input, enc_mask=enc_mask,
                          enc_out=enc_out)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        return logits, loss


# --------------------------------------------------------------------------- the reversal task
# A one-layer encoder and a one-layer decoder; learned positions (a reversal is all about positions).
REVERSE_RECIPE = dict(model=dict(n_layer=1, n_enc_layer=1, n_head=1, n_embd=32, pos_encoding="learned"),
                      steps=1000, batch_size=64, lr=3e-3, eval_size=1000, eval_every=100)


def reverse_config(task, seed: int = 0, **overrides) -> ModelConfig:
    m = dict(REVERSE_RECIPE["model"], **overrides)
    return ModelConfig(vocab_size=task.vocab_size, block_size=task.block_size, enc_len=task.enc_len, seed=seed, **m)


@torch.no_grad()
def evaluate_reverse(model: Seq2Seq, task, n: int = 1000, seed: int = 10_000) -> tuple[float, float]:
    """(loss, token accuracy) of the teacher-forced decoder on ``n`` fresh sequences from a seeded generator."""
    b = task.batch(n, torch.Generator().manual_seed(seed))
    logits, loss = model.eval()(b.x, b.y, enc_input=b.src)
    return float(loss), task.accuracy(logits, b.y)


def train_reverse(steps: Optional[int] = None, batch_size: Optional[int] = None, lr: Optional[float] = None,
                  seed: int = 0, task=None, on_progress=None, **model_overrides):
    """Train an encoder-decoder model on ``ReverseTask`` with AdamW (cosine decay to a tenth). Seeded.

    Returns ``(model, history)``; history has ``steps``, ``loss`` (training, per step), ``eval_steps``,
    ``eval_loss``, ``accuracy`` (on 1000 held-out sequences) and ``seconds``."""
    from ..training.tasks import ReverseTask
    from ..training.loop import TrainConfig, lr_factor

    r = REVERSE_RECIPE
    task = task or ReverseTask()
    steps = steps or r["steps"]
    batch_size = batch_size or r["batch_size"]
    lr = lr or r["lr"]
    model = Seq2Seq(reverse_config(task, seed, **model_overrides))
    tc = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(tc, i))
    g = torch.Generator().manual_seed(seed)
    hist = dict(steps=[], loss=[], eval_steps=[], eval_loss=[], accuracy=[], seconds=0.0)
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        model.train()
        b = task.batch(batch_size, g)
        _, loss = model(b.x, b.y, enc_input=b.src)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
        opt.step()
        sched.step()
        hist["steps"].append(step)
        hist["loss"].append(loss.item())
        if step % r["eval_every"] == 0 or step == steps:
            el, acc = evaluate_reverse(model, task, r["eval_size"], 10_000 + seed)
            hist["eval_steps"].append(step), hist["eval_loss"].append(el), hist["accuracy"].append(acc)
            if on_progress is not None:
                on_progress(step, hist)
    hist["seconds"] = time.perf_counter() - t0
    model.eval()
    model.zero_grad(set_to_none=True)
    return model, hist


@torch.no_grad()
def alignment(model: Seq2Seq, task, n: int = 200, seed: int = 1) -> torch.Tensor:
    """Cross-attention weight on the aligned source position (L-1-t for output position t), per layer and head,
    averaged over ``n`` seeded sequences and every output position: (n_layer, n_head)."""
    from ..run.trace import trace

    b = task.batch(n, torch.Generator().manual_seed(seed))
    tr = trace(model, b.x, enc_input=b.src)
    L = task.length
    rows = []
    for layer in range(model.config.n_layer):
        p = tr[f"blocks.{layer}.cross_attn.hook_pattern"]  # (B, nh, T, S)
        t = torch.arange(L)
        rows.append(p[:, :, t, L - 1 - t].mean(dim=(0, 2)))
    return torch.stack(rows)


def reverse_cli(a, argv=None) -> int:
    """``python -m gptviz.train --task reverse --out FILE``: train, report, save the checkpoint."""
    from .checkpoint import save_checkpoint
    from ..training.tasks import ReverseTask

    task = ReverseTask()
    t0 = time.perf_counter()

    def progress(step, h):
        print(f"step {step:5d}  loss {h['eval_loss'][-1]:.4f}  accuracy {h['accuracy'][-1]:.4f}  "
              f"{time.perf_counter() - t0:6.1f}s", flush=True)

    overrides = {k: getattr(a, k) for k in ("n_layer", "n_head", "n_embd") if getattr(a, k, None) is not None}
    model, hist = train_reverse(a.steps, a.batch_size, a.lr, a.seed, task, progress, **overrides)
    acc = hist["accuracy"][-1]
    align = alignment(model, task)
    save_checkpoint(a.out, model, task.tokenizer, task="reverse", steps=hist["steps"][-1], seed=a.seed,
                    threads=a.threads, accuracy=acc, final_loss=hist["eval_loss"][-1],
                    train_seconds=round(hist["seconds"], 1), example=task.example(),
                    decoder_example=task.decoder_text(task.example()), alignment=align.tolist(),
                    command="python -m gptviz.train " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(f"saved {a.out}: accuracy {acc:.4f}, loss {hist['eval_loss'][-1]:.4f}, {hist['seconds']:.1f}s, "
          f"cross-attention on the aligned position per head {[round(v, 3) for v in align.flatten().tolist()]}")
    if acc < 0.99:
        print(f"warning: accuracy {acc:.4f} is below the target 0.99", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------- the material's training loop
def material_recipe(steps: int = 200, lr: float = 0.01, batch: int = 10, seed: int = 0, shift: bool = False,
                    config: Optional[ModelConfig] = None) -> dict:
    """The teaching material's loop on the ``decoder-cross-attention`` preset: plain SGD at ``lr``, one
    full-batch step per iteration, on a fixed seeded random encoder output (batch, 8, 32) and fixed seeded
    integer targets (batch, 8).

    The decoder reads the target sequence itself and is scored on it (``shift=False``, as the material's loop
    feeds ``tgt`` both ways); ``shift=True`` makes it next-token prediction instead (token 0 as the start).
    Returns ``{"loss": [loss before each step] + [final loss], "model": trained model, "enc_out", "targets"}``.
    """
    from ..config import preset

    cfg = config or preset("decoder-cross-attention", seed=seed)
    model = Seq2Seq(cfg)
    g = torch.Generator().manual_seed(seed)
    enc_out = model.fixed_enc_out(batch)  # (batch, enc_len, n_embd)
    targets = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
    x = torch.cat([torch.zeros(batch, 1, dtype=torch.long), targets[:, :-1]], 1) if shift else targets
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    model.train()
    for _ in range(steps):
        _, loss = model(x, targets, enc_out=enc_out)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        losses.append(float(model(x, targets, enc_out=enc_out)[1]))
    model.zero_grad(set_to_none=True)
    return {"loss": losses, "model": model, "enc_out": enc_out, "targets": targets, "inputs": x}


# The material's loop as it would be written by hand (shown on the Training page next to material_recipe).
MATERIAL_LOOP_CODE = """model = Decoder(...)                     # 1 layer, d_model 32, 8 heads, post-norm, 17,516 parameters
enc_out = torch.randn(10, 8, 32)          # a fixed random encoder output
tgt = torch.randint(0, 12, (10, 8))       # fixed random targets
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(steps):
    logits = model(tgt, enc_out)          # the decoder reads the targets themselves
    loss = F.cross_entropy(logits.view(-1, 12), tgt.view(-1))
    opt.zero_grad(); loss.backward(); opt.step()"""
