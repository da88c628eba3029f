"""TransformerBase, what GPT and the encoder-decoder model share: seeded set-up, input checks, masks, parameter table.

A subclass builds its modules on the meta device, declares its hook points, then calls ``set_up(n_pos)``,
which allocates the weights on the CPU, ties the head, registers the position tables, and initialises
every weight from a private generator seeded with ``config.seed``: the global RNG is neither read nor advanced,
and the same config always gives the same weights. The causal mask is built at each forward pass for the real
sequence length (T × T), never block_size × block_size.

``config.check_limits`` counts the parameters and the position tables before anything is allocated; inside
``shapes_only()`` a model stays on the meta device (shapes, no memory), so a loader can compare a file's tensors
with the shapes a config asks for before building it.
"""
from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .hook_points import HookPoint
from .layers import Linear, rope_angles, sinusoidal_table
from .rope_scaling import own_tables, rope_cos_sin

_BUILD = threading.local()


@contextmanager
def shapes_only() -> Iterator[None]:
    """Models built in this block stay on the meta device: ``set_up`` allocates, ties and initialises nothing."""
    before = getattr(_BUILD, "shapes_only", False)
    _BUILD.shapes_only = True
    try:
        yield
    finally:
        _BUILD.shapes_only = before


class TransformerBase(nn.Module):
    """A token-embedding transformer with an LM head: the part of GPT and Seq2Seq that does not depend on the blocks.

    Subclasses define ``run`` and ``forward``, and say how many residual branches they have (``residual_branches``).
    """

    # what the subclasses build and set_up registers: the ``transformer`` ModuleDict's modules are read as attributes
    # (``transformer.wte``, ``.h``, ``.ln_f``), which torch types only as "a Tensor or a Module", hence Any
    transformer: Any
    lm_head: Linear
    pos_table: torch.Tensor  # sinusoidal positions only
    rope_cos: torch.Tensor  # rotary positions only
    rope_sin: torch.Tensor
    rope_cos_local: torch.Tensor  # Gemma 3's sliding layers' own (rope_local_base) only
    rope_sin_local: torch.Tensor

    def __init__(self, config: ModelConfig):
        super().__init__()
        config.check_limits(batch=1, seq_len=1)
        self.config = config

    def set_up(self, n_pos: int) -> None:
        """Allocate the meta-built weights, tie the head, register the tables for ``n_pos`` positions, initialise
        from ``config.seed``, and switch to eval mode (a model here is mostly looked at: dropout is off until
        ``.train()`` is called). Inside ``shapes_only()``, nothing: the model stays on the meta device."""
        config = self.config
        if getattr(_BUILD, "shapes_only", False):
            return
        # nn.Module.to_empty's torch.empty_like of a meta tensor runs torch's Python reference for it, whose first call
        # imports sympy (0.3 s, on the path of a fresh server's first page); torch.empty of the same shape does not
        self._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device="cpu"))
        if config.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight
        if config.pos_encoding == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(n_pos, config.n_embd), persistent=False)
        if config.pos_encoding == "rope":
            cos, sin = rope_cos_sin(config, n_pos)  # (n_pos, d_rot/2) each: the dimensions turned, scaled if so
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
            if config.rope_local_base is not None:  # the sliding layers' plain tables of their own base
                ang = rope_angles(n_pos, config.d_rot, config.rope_local_base)  # (n_pos, d_rot/2)
                self.register_buffer("rope_cos_local", ang.cos(), persistent=False)
                self.register_buffer("rope_sin_local", ang.sin(), persistent=False)
        self.reset_parameters(config.seed)
        self.eval()

    # ------------------------------------------------------------------ weights
    def residual_branches(self) -> int:
        """How many branches write into the residual stream (it scales the output projections' initial weights)."""
        raise NotImplementedError

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """nanoGPT's initialisation, drawn from a generator seeded with ``seed``: normal(0, init_std), biases 0,
        norm weights 1, and the residual projections (``c_proj``, ``o_proj``) scaled by 1/√(residual branches)."""
        g = torch.Generator().manual_seed(seed)
        std = self.config.init_std
        n_resid = self.residual_branches()
        for name, p in self.named_parameters():
            if name.rsplit(".", 1)[-1] in ("bias", "sinks"):  # an attention sink starts at logit 0
                p.zero_()
            elif p.dim() == 1:  # norm weight
                p.fill_(1.0)
            elif name.endswith(("c_proj.weight", "o_proj.weight")):  # residual projections, scaled as in GPT-2
                p.normal_(0.0, std / math.sqrt(n_resid), generator=g)
            else:
                p.normal_(0.0, std, generator=g)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def parameter_table(self) -> list[dict]:
        """One row per parameter tensor: name, shape, count. A tied head is listed with its partner."""
        rows = [
            {"name": name, "shape": tuple(p.shape), "count": p.numel()}
            for name, p in self.named_parameters()
        ]
        if self.config.tie_weights:
            rows.append({"name": "lm_head.weight (tied to transformer.wte.weight)",
                         "shape": tuple(self.lm_head.weight.shape), "count": 0})
        return rows

    def hook_names(self) -> list[str]:
        """The names of every hook point in this model, in module order."""
        return [m.name for m in self.modules() if isinstance(m, HookPoint)]

    # ------------------------------------------------------------------ inputs
    def check_inputs(self, idx: torch.Tensor, targets=None, attention_mask=None) -> None:
        """Refuse, with a ValueError that says why, token ids the decoder cannot read."""
        cfg = self.config
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
            raise ValueError("idx must be a 2-D tensor of token ids, shape (batch, pos)")
        if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"idx must hold integer token ids, not {idx.dtype}")
        B, T = idx.shape
        if B < 1 or T < 1:
            raise ValueError(f"idx has shape {tuple(idx.shape)}: it needs at least one token")
        if T > cfg.block_size:
            raise ValueError(f"sequence length {T} is longer than block_size={cfg.block_size}")
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= cfg.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary (vocab_size={cfg.vocab_size})")
        for name, t in (("targets", targets), ("attention_mask", attention_mask)):
            if t is not None and tuple(t.shape) != (B, T):
                raise ValueError(f"{name} must have the shape of idx {(B, T)}, not {tuple(t.shape)}")

    # ------------------------------------------------------------------ forward helpers
    def allowed_keys(self, T: int, attention_mask: Optional[torch.Tensor], window: Optional[int] = None):
        """``(allowed, dead)``. allowed: (1 or B, 1, T, T) bool, query i may look at key j (causal, and
        not at padded keys; with a sliding ``window``, only keys j > i - window, as transformers'
        ``sliding_window_overlay``). dead: the query rows that may look at no key at all, or None if there are none."""
        # built for this T only, never block_size²
        allowed = torch.ones(T, T, dtype=torch.bool, device=self.lm_head.weight.device).tril()[None, None]
        if window is not None and window < T:  # j > i - window, i.e. j - i >= 1 - window
            allowed = allowed.triu(1 - window)
        if attention_mask is None:
            return allowed, None  # the diagonal is always allowed
        allowed = allowed & attention_mask.bool()[:, None, None, :]
        dead = ~allowed.any(dim=-1, keepdim=True)
        return allowed, (dead if bool(dead.any()) else None)

    def layer_masks(self, T: int, attention_mask: Optional[torch.Tensor]) -> list:
        """Each decoder layer's ``allowed_keys`` for its self-attention: the sliding window on the layers that use
        one (``config.layer_window``), plain causal attention on the others. Each distinct mask is built once and
        the layers that share it hold the same tensors."""
        built: dict[Optional[int], tuple] = {}
        masks = []
        for layer in range(self.config.n_layer):
            w = self.config.layer_window(layer)
            if w not in built:
                built[w] = self.allowed_keys(T, attention_mask, w)
            masks.append(built[w])
        return masks

    def position_vectors(self, B: int, T: int, wpe: Optional[nn.Embedding], device) -> Optional[torch.Tensor]:
        """The position vectors added to the token embeddings, (B, T, C): from the learned table ``wpe`` or the
        fixed sin/cos table; None when positions are rotary or absent."""
        cfg = self.config
        if cfg.pos_encoding == "learned":
            assert wpe is not None  # a model with learned positions has its table
            return wpe(torch.arange(T, device=device))[None].expand(B, T, cfg.n_embd)
        if cfg.pos_encoding == "sinusoidal":
            return self.pos_table[:T][None].expand(B, T, cfg.n_embd)
        return None

    def rope_tables(self, T: int, local: bool = False):
        """``(cos, sin)``, each (T, d_rot/2), for rotary positions; None for any other kind. Dynamic NTK scaling
        works a text longer than its original context out from that text's length, as transformers does for each
        forward pass (``rope_scaling.inverse_frequencies``): those tables are built for this T. ``local``: the
        sliding layers' own plain tables (``config.rope_local_base``, Gemma 3), never scaled."""
        if local:
            return self.rope_cos_local[:T], self.rope_sin_local[:T]
        if own_tables(self.config, T):
            cos, sin = rope_cos_sin(self.config, T, seq_len=T)
            return cos.to(self.rope_cos.device), sin.to(self.rope_sin.device)
        return (self.rope_cos[:T], self.rope_sin[:T]) if self.config.pos_encoding == "rope" else None

    @staticmethod
    def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of ``logits`` (B, T, V) against ``targets`` (B, T); a target of -100 is skipped."""
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
