"""CosyVoice 2 and CosyVoice 3 (FunAudioLLM/CosyVoice, Apache-2.0): text -> speech tokens (a Qwen2 LM, 25 Hz) ->
an 80-band mel (a flow-matching decoder, 50 Hz) -> 24 kHz audio (HiFT, mizuoto/nn). Ported from upstream's code at
ace7c47 (third_party/Matcha-TTS at dd9105b)."""
