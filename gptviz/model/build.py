"""build_model: the model a config describes, a decoder-only GPT or an encoder-decoder Seq2Seq."""
from __future__ import annotations

from ..config import ModelConfig
from .base import TransformerBase
from .encoder_decoder import Seq2Seq
from .gpt import GPT


def build_model(config: ModelConfig) -> TransformerBase:
    """The model a config describes: a decoder-only ``GPT`` (n_enc_layer = -1) or an encoder-decoder ``Seq2Seq``."""
    return GPT(config) if config.n_enc_layer < 0 else Seq2Seq(config)
