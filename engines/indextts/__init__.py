"""IndexTTS 2 (index-tts/index-tts): ported from upstream's code at ee40fa7. So far the GPT's conditioning encoders
(conformer.py, perceiver.py, conditioning.py); no engine declaration yet."""
