"""Layer 4, running a model: the trace (every hooked tensor), edits, the loss taken apart, generation.

Imports only config, text and model.
"""
