"""gptviz: a small GPT whose every step can be seen.

The engine imports without Streamlit. Start with ``ModelConfig``, ``GPT`` and ``trace``; an encoder-decoder
model (cross-attention) is a ``Seq2Seq``, and ``build_model(config)`` makes whichever a config describes.
"""
from .model.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .config import PRESETS, PRESET_DESCRIPTIONS, ModelConfig, preset
from .text.batches import BUILTIN_TEXT, Batch, encode_batch, pad_batch, stream_batch
from .run.loss import loss_breakdown
from .model.gpt import GPT, HookPoint
from .model.encoder_decoder import Seq2Seq, build_model
from .present.descriptions import StepInfo, describe
from .text.tokenizers import TOKENIZER_NAMES, CharBPETokenizer, TiktokenTokenizer, TokenizerUnavailable, get_tokenizer
from .run.trace import Trace, trace

__all__ = [
    "PRESETS", "PRESET_DESCRIPTIONS", "ModelConfig", "preset", "BUILTIN_TEXT", "Batch", "encode_batch",
    "pad_batch", "stream_batch", "loss_breakdown", "GPT", "HookPoint", "Seq2Seq", "build_model", "StepInfo", "describe",
    "TOKENIZER_NAMES", "CharBPETokenizer", "TiktokenTokenizer", "TokenizerUnavailable", "get_tokenizer",
    "Trace", "trace", "Checkpoint", "load_checkpoint", "save_checkpoint",
]
