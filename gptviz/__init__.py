"""gptviz: a small GPT whose every step can be seen.

The engine imports without Streamlit. Start with ``ModelConfig``, ``GPT`` and ``trace``; an encoder-decoder
model (cross-attention) is a ``Seq2Seq``, and ``build_model(config)`` makes whichever a config describes.
"""
from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .config import PRESETS, PRESET_DESCRIPTIONS, ModelConfig, preset
from .data import BUILTIN_TEXT, Batch, encode_batch, pad_batch, stream_batch
from .loss import loss_breakdown
from .model import GPT, HookPoint
from .seq2seq import Seq2Seq, build_model
from .steps import StepInfo, describe
from .tokenizers import (
    TOKENIZER_NAMES,
    CharBPETokenizer,
    TiktokenTokenizer,
    TokenizerUnavailable,
    get_tokenizer,
)
from .trace import Trace, trace

__all__ = [
    "PRESETS", "PRESET_DESCRIPTIONS", "ModelConfig", "preset", "BUILTIN_TEXT", "Batch", "encode_batch",
    "pad_batch", "stream_batch", "loss_breakdown", "GPT", "HookPoint", "Seq2Seq", "build_model", "StepInfo", "describe",
    "TOKENIZER_NAMES", "CharBPETokenizer", "TiktokenTokenizer", "TokenizerUnavailable", "get_tokenizer",
    "Trace", "trace", "Checkpoint", "load_checkpoint", "save_checkpoint",
]
