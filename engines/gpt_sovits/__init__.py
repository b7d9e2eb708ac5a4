"""GPT-SoVITS (RVC-Boss/GPT-SoVITS, MIT): a voice = a GPT weights file (text -> semantic tokens, t2s.py) and a
SoVITS weights file (semantic tokens + reference -> waveform). Ported from upstream's code at 48b1a01."""
