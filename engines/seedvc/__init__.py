"""Seed-VC: zero-shot voice conversion (v1 offline: Whisper content, CAM++ style, the s2mel DiT, BigVGAN)."""
