"""Developers' tools: not part of the app or the engine."""
