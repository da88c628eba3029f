"""Layer 5, training: tasks, the loop, the recipes behind the shipped models, the initialisation study.

Imports only config, text, model, run and interp.
"""
