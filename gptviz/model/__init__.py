"""Layer 3, models: hook points, layers, the shared base, GPT, the encoder-decoder, GPT-2 import, checkpoints.

Imports only gptviz.config and gptviz.text.
"""
