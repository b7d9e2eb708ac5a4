"""Shared network blocks: linear layers, norms, rotary embeddings and the Qwen decoder stack."""
