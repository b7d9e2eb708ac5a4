"""F5-TTS, native: exact to f5-tts 1.1.22 with the Vocos 0.1.0 vocoder (MIT code; weights CC-BY-NC-4.0)."""
