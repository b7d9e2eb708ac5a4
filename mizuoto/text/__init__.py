"""Text parts more than one engine uses (engines never import each other): Qwen2's byte-level BPE tokenizer."""
