"""Weight import: Hugging Face GPT-2 into a gptviz GPT."""
from __future__ import annotations

import torch

from ..config import ModelConfig
from .gpt import GPT

_HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def config_from_hf_gpt2(hf_config) -> ModelConfig:
    """The gptviz config with the same shape and choices as a Hugging Face ``GPT2Config``."""
    act = getattr(hf_config, "activation_function", "gelu_new")
    if act not in _HF_ACTIVATIONS:
        raise ValueError(f"activation_function={act!r} has no gptviz equivalent")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if getattr(hf_config, flag, False):
            raise ValueError(f"{flag}=True is not supported: gptviz computes attention as GPT-2 does")
    if not getattr(hf_config, "scale_attn_weights", True):
        raise ValueError("scale_attn_weights=False is not supported: gptviz always divides by √d_head")
    return ModelConfig(
        vocab_size=hf_config.vocab_size,
        block_size=hf_config.n_positions,
        n_layer=hf_config.n_layer,
        n_head=hf_config.n_head,
        n_embd=hf_config.n_embd,
        d_mlp=hf_config.n_inner or 4 * hf_config.n_embd,
        activation=_HF_ACTIVATIONS[act],
        ln_eps=hf_config.layer_norm_epsilon,
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", True)),
        init_std=hf_config.initializer_range,
        bias=True,
        qkv_bias=True,
    )


def gpt2_state_dict_to_gptviz(sd: dict, n_layer: int) -> dict:
    """Rename (and transpose) a Hugging Face GPT-2 state dict into gptviz's names.

    GPT-2's Conv1D layers store weights as (in, out); nn.Linear wants (out, in).
    """
    sd = {k.removeprefix("transformer."): v for k, v in sd.items()}
    out = {}
    for k, v in sd.items():
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue  # old causal-mask buffers, not weights
        if k.startswith("h.") and k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            v = v.t()
        if k == "lm_head.weight":
            out[k] = v
        else:
            out["transformer." + k] = v
    if "lm_head.weight" not in out:
        if "transformer.wte.weight" not in out:
            raise ValueError("these GPT-2 weights lack wte.weight (the token embedding)")
        out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def from_hf_gpt2(hf_model) -> GPT:
    """A gptviz GPT with the weights of a ``transformers`` ``GPT2LMHeadModel`` (same logits)."""
    cfg = config_from_hf_gpt2(hf_model.config)
    model = GPT(cfg)
    sd = gpt2_state_dict_to_gptviz({k: v.detach() for k, v in hf_model.state_dict().items()}, cfg.n_layer)
    load_state(model, sd)
    return model


@torch.no_grad()
def load_state(model, sd: dict) -> None:
    """Copy tensors into ``model`` by name, checking that every name and shape matches."""
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(sd))
    if missing:
        raise ValueError("the weights lack: " + ", ".join(missing[:6]) + (" …" if len(missing) > 6 else ""))
    if not model.config.tie_weights and "lm_head.weight" not in sd:
        raise ValueError("the weights lack lm_head.weight")
    for name, p in own.items():
        t = sd[name]
        if tuple(t.shape) != tuple(p.shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)} but the model wants {tuple(p.shape)}")
        p.copy_(t.to(p.dtype))
    if not model.config.tie_weights:
        model.lm_head.weight.copy_(sd["lm_head.weight"])
