"""Whisper, native: exact to openai-whisper 20250625 (MIT).

Work in progress: the log-mel front end, the tokenizer and the model are here; decoding, the
transcribe loop, the nodes and the declaration (which registers the engine) come next.
"""
