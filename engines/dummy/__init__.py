"""The dummy engine: a small but real text-to-speech model for testing the whole pipeline.

Text becomes byte ids, a tiny transformer (one attention site, `dummy.attn`) predicts per-token
frame parameters (pitch, energy, harmonic mix, breath noise, duration), and a deterministic
harmonic synthesiser turns them into a waveform. Randomness (harmonic phases, breath noise) comes
only from the request's generator, so a seed fixes the samples bit for bit.
"""
