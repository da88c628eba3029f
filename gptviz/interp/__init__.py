"""Layer 5, interpretation: the logit lens and attribution, activation patching, the head detector.

Imports only config, text, model and run.
"""
