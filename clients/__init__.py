"""Flower ClientApp adapters: decode a message, call the core, encode the reply."""
