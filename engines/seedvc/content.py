"""Seed-VC v1's content features: a Whisper encoder's last hidden states for 16 kHz speech, 50 per second.

As seed-vc 0.4.3's `SeedVCWrapper._process_whisper_features`: transformers' WhisperFeatureExtractor features of
each 30 s window (mizuoto/audio/whisper_features.py) through transformers' WhisperEncoder (the shared encoder with
its "transformers" numerics), in float16 as upstream forces it (`torch_dtype=torch.float16`, on every device) or
in float32, the result in float32, cut to samples // 320 + 1 frames. Audio past 30 s goes in windows that restart
5 s before the previous one ended: the first window's frames are kept whole, later windows drop their first 250.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mizuoto.audio import whisper_features
from mizuoto.core.errors import CheckpointError
from mizuoto.nn import whisper_encoder
from mizuoto.nn.tensor_files import read_checkpoint

WINDOW = whisper_features.N_SAMPLES  # 30 s at 16 kHz
OVERLAP_SECONDS = 5
SAMPLES_PER_FRAME = 320  # the encoder's 50 frames per second


def load_encoder(folder: Path, device, dtype: torch.dtype) -> whisper_encoder.AudioEncoder:
    """The encoder of a transformers Whisper folder (config.json and model.safetensors or pytorch_model.bin),
    its decoder left unread as upstream deletes it."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {folder / 'config.json'} ({error})") from None
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).is_file()), None)
    if weights is None:
        raise CheckpointError(f"{folder} holds no model.safetensors or pytorch_model.bin (the Whisper weights)")
    dims = whisper_encoder.dims_from_hf(config)
    names = {k: v for k, v in read_checkpoint(weights).items()
             if k.removeprefix("model.").removeprefix("whisper.").startswith("encoder.")}
    state = {k[len("encoder."):]: v for k, v in whisper_encoder.hf_to_openai(names).items()}
    with torch.device("meta"):
        encoder = whisper_encoder.AudioEncoder(dims, numerics="transformers")
    expected = encoder.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing or any(state[k].shape != v.shape for k, v in expected.items()):
        raise CheckpointError(f"{weights} does not hold the encoder its config.json describes "
                              f"({'missing ' + missing[0] if missing else 'tensor shapes differ'})")
    encoder.to_empty(device="cpu")
    encoder.load_state_dict({k: state[k] for k in expected}, strict=True)
    return encoder.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _window_features(encoder: whisper_encoder.AudioEncoder, window: torch.Tensor) -> torch.Tensor:
    mel = whisper_features.log_mel(window[0], encoder.conv1.in_channels)
    weight = encoder.conv1.weight
    hidden = encoder(mel.to(device=weight.device, dtype=weight.dtype)).to(torch.float32)
    return hidden[:, : window.shape[-1] // SAMPLES_PER_FRAME + 1]


def content_features(encoder: whisper_encoder.AudioEncoder, audio_16k: torch.Tensor) -> torch.Tensor:
    """(1, samples) 16 kHz audio -> (1, frames, d_model) float32."""
    samples = audio_16k.shape[-1]
    if samples <= WINDOW:
        return _window_features(encoder, audio_16k)
    overlap = whisper_features.SAMPLE_RATE * OVERLAP_SECONDS
    pieces, buffer, done = [], None, 0
    while done < samples:
        if buffer is None:
            window = audio_16k[:, done:done + WINDOW]
        else:
            window = torch.cat([buffer, audio_16k[:, done:done + WINDOW - overlap]], dim=-1)
        features = _window_features(encoder, window)
        pieces.append(features if done == 0 else features[:, 50 * OVERLAP_SECONDS:])
        buffer = window[:, -overlap:]
        done += WINDOW if done == 0 else window.shape[-1] - overlap
    return torch.cat(pieces, dim=1)
