"""Every Hugging Face family gptviz opens, by ``model_type``: the dense ones (``hf_families``, ``hf_phi3``) and the
mixtures of experts (``hf_moe``), which build on them; and, for the Model & weights page and the README, each
family's name and what it adds to the blocks gptviz draws (``FAMILY_TABLE``, one row per family)."""
from __future__ import annotations

from typing import NamedTuple

from .hf_families import FAMILIES as DENSE_FAMILIES
from .hf_families import Family
from .hf_moe import MOE_FAMILIES

FAMILIES: dict[str, Family] = {**DENSE_FAMILIES, **MOE_FAMILIES}


class FamilyRow(NamedTuple):
    name: str  # as people call it
    adds: str  # what its blocks add to GPT-2's, each a step gptviz records and draws


FAMILY_TABLE: dict[str, FamilyRow] = {
    "gpt2": FamilyRow("GPT-2", "learned positions, LayerNorm, GELU MLP"),
    "llama": FamilyRow("Llama (2, 3.x, SmolLM2, TinyLlama)",
                       "RMSNorm, rotary positions with llama3/linear/dynamic/yarn scaling, grouped-query attention, "
                       "SwiGLU"),
    "mistral": FamilyRow("Mistral", "Llama's blocks with a sliding window on every layer (a band on the masked "
                                    "scores)"),
    "qwen2": FamilyRow("Qwen2, Qwen2.5", "q/k/v biases; a sliding window on the layers it names"),
    "qwen3": FamilyRow("Qwen3", "QK-norm: each head's queries and keys normalised before rotary (two steps of their "
                                "own)"),
    "gpt_neox": FamilyRow("GPT-NeoX (Pythia)", "attention and MLP side by side, partial rotary"),
    "gemma": FamilyRow("Gemma 1", "GeGLU, RMSNorm gains 1 + w, embeddings scaled by √d_model"),
    "gemma2": FamilyRow("Gemma 2", "norms before and after each sublayer, soft-capped attention scores and logits "
                                   "(two steps of their own), query_pre_attn_scalar, alternating sliding windows"),
    "gemma3_text": FamilyRow("Gemma 3 (text)", "Gemma 2's blocks with QK-norm, local and global layers with their own "
                                               "rotary bases"),
    "olmo2": FamilyRow("OLMo 2", "norms after the sublayers only, QK-norm over the whole query and key projections"),
    "phi3": FamilyRow("Phi-3", "fused QKV and gate-up projections, partial rotary, longrope scaling"),
    "mixtral": FamilyRow("Mixtral", "a mixture of experts in every layer: router logits and probabilities, top-2 "
                                    "experts and their weights"),
    "olmoe": FamilyRow("OLMoE", "a mixture of experts in every layer (top-8 of 64 in OLMoE-1B-7B), QK-norm over the "
                                "whole projections"),
    "qwen2_moe": FamilyRow("Qwen2-MoE", "experts on the layers it names, and a shared expert with a sigmoid gate"),
    "gpt_oss": FamilyRow("GPT-OSS", "learned attention sinks (a \"sink\" key column), alternating sliding windows, "
                                    "YaRN, experts with biases and a clamped gated unit"),
}
