"""Qwen3-TTS, native: exact to qwen-tts 0.1.1 (Apache-2.0 code and weights)."""
