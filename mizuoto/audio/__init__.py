"""Audio files without torchaudio."""
