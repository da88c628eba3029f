"""gptviz: a small GPT whose every step can be seen.

The engine imports without Streamlit. Start with ``ModelConfig``, ``GPT`` and ``trace``; an encoder-decoder
model (cross-attention) is a ``Seq2Seq``, and ``build_model(config)`` makes whichever a config describes.
``from_hf_gpt2(hf_model)`` imports a Hugging Face GPT-2; ``from_pretrained(folder)`` opens a Hugging Face model
folder (GPT-2, Llama, Mistral, Qwen2, Qwen3, GPT-NeoX, Gemma 1, 2 and 3, OLMo 2) with its tokenizer.
"""
from .config import PRESET_DESCRIPTIONS, PRESETS, ModelConfig, preset
from .interp.attribution import attention_rollout, integrated_gradients
from .interp.sae import SparseAutoencoder
from .interp.sae_formats import load_sae
from .model.build import build_model
from .model.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .model.encoder_decoder import Seq2Seq
from .model.gpt import GPT
from .model.hf_gpt2 import from_hf_gpt2
from .model.hook_names import act_name
from .model.hook_points import HookPoint
from .model.pretrained import from_pretrained
from .present.descriptions import StepInfo, describe
from .run.loss import loss_breakdown
from .run.trace import Trace, trace
from .text.batches import BUILTIN_TEXT, Batch, encode_batch, pad_batch, stream_batch
from .text.tokenizers import TOKENIZER_NAMES, CharBPETokenizer, TiktokenTokenizer, TokenizerUnavailable, get_tokenizer

__all__ = [
    "PRESETS", "PRESET_DESCRIPTIONS", "ModelConfig", "preset", "BUILTIN_TEXT", "Batch", "encode_batch",
    "pad_batch", "stream_batch", "loss_breakdown", "GPT", "HookPoint", "Seq2Seq", "build_model", "from_hf_gpt2",
    "from_pretrained", "attention_rollout", "integrated_gradients",
    "StepInfo", "describe",
    "TOKENIZER_NAMES", "CharBPETokenizer", "TiktokenTokenizer", "TokenizerUnavailable", "get_tokenizer",
    "Trace", "trace", "Checkpoint", "load_checkpoint", "save_checkpoint", "act_name", "SparseAutoencoder", "load_sae",
]
