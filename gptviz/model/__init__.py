"""Layer 3, models: hook points, shared layers, GPT, the encoder-decoder, Hugging Face import, checkpoints.

Imports only gptviz.config and gptviz.text.
"""
