"""Layer 2, text: tokenizers, BPE, batches, the Shakespeare corpus, and the packaged vocabulary and corpus files.

Imports only gptviz.config.
"""
