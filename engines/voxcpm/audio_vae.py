"""VoxCPM's AudioVAE, v1 (VoxCPM 0.5B, 1.5) and v2 (VoxCPM2), native.

Exact to voxcpm 2.0.3's `modules/audiovae/audio_vae.py` (v1) and `audio_vae_v2.py` (v2): on the same
device, thread count and CPU kernel level, float32 `encode`, `decode` and the streamed chunks of
`stream().decode_chunk` are bit-identical to upstream's `encode`, `decode` and
`streaming_decode().decode_chunk`.

    encode:  audio (B, 1, T) at sample_rate, right-padded with zeros to a multiple of chunk_size
             -> kernel-7 conv -> one EncoderBlock per encoder rate -> fc_mu (kernel 3)
             -> latents (B, latent_dim, T / chunk_size)          (the VAE mean; logvar is never used)
    decode:  latents (B, latent_dim, n) -> [depthwise kernel-7 conv, 1x1 conv] (or one kernel-7 conv)
             -> one DecoderBlock per decoder rate (v2: each after its sample-rate conditioning)
             -> Snake -> kernel-7 conv to 1 channel -> tanh
             -> audio (B, 1, n * decode_chunk_size) at output_sample_rate

Every convolution is causal, so the decoder can run chunk by chunk, carrying each layer's last input
frames (upstream's v2 `StreamingVAEDecoder`, which patches its modules' forwards; here `VAEStream`
holds the per-layer tails in fixed-shape tensors that the layers update in place).

Upstream loads `audiovae.safetensors` (or `audiovae.pth`, whose tensors may sit under "state_dict")
with `load_state_dict(strict=False)`: a missing or stray tensor passes silently there (a missing one
keeps its random initial value). `load_audio_vae` instead insists on the exact layout, except for
`encoder.fc_logvar.*` (never used) and `decoder.sr_bin_boundaries` (optional: when present, its values
replace the config's, as they do upstream).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.tensor_files import read_checkpoint

from .audio_vae_config import AudioVAEConfig, AudioVAEV2Config
from .audio_vae_layers import (
    CausalConv,
    CausalUpConv,
    DecoderBlock,
    EncoderBlock,
    NoiseBlock,
    SampleRateCondition,
    Snake,
    causal_conv,
)

WEIGHT_FILES = ("audiovae.safetensors", "audiovae.pth")  # in upstream's order of preference
OPTIONAL_PREFIX = "encoder.fc_logvar."  # in every checkpoint, read by nothing at inference
BOUNDARIES = "decoder.sr_bin_boundaries"


class VAEEncoder(nn.Module):
    def __init__(self, config: AudioVAEConfig):
        super().__init__()
        width = config.encoder_dim
        blocks: list[nn.Module] = [causal_conv(1, width, 7, 3)]
        for rate in config.encoder_rates:
            blocks.append(EncoderBlock(width, 2 * width, rate, width if config.depthwise else 1, config.version))
            width *= 2
        self.block = nn.ModuleList(blocks)
        self.fc_mu = causal_conv(width, config.latent_dim, 3, 1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """(B, 1, T), T a multiple of chunk_size -> the latent mean (B, latent_dim, T / chunk_size)."""
        x = audio
        for layer in self.block:
            x = layer(x)
        return self.fc_mu(x)


class VAEDecoder(nn.Module):
    def __init__(self, config: AudioVAEConfig):
        super().__init__()
        latent, width = config.latent_dim, config.decoder_dim
        if config.depthwise:
            layers: list[nn.Module] = [causal_conv(latent, latent, 7, 3, groups=latent),
                                       causal_conv(latent, width, 1, 0)]
        else:
            layers = [causal_conv(latent, width, 7, 3)]
        for i, rate in enumerate(config.decoder_rates):
            in_dim, out_dim = width // 2 ** i, width // 2 ** (i + 1)
            layers.append(DecoderBlock(in_dim, out_dim, rate, out_dim if config.depthwise else 1,
                                       config.use_noise_block))
        last = width // 2 ** len(config.decoder_rates)
        layers += [Snake(last), causal_conv(last, 1, 7, 3)]  # upstream's nn.Tanh follows (no tensors)
        self.model = nn.ModuleList(layers)

        self.conditioned = config.conditioned
        if self.conditioned:
            assert isinstance(config, AudioVAEV2Config)
            self.register_buffer("sr_bin_boundaries", torch.tensor(config.sr_bin_boundaries, dtype=torch.int32))
            # keyed by the index of the block they precede, as upstream's list (None elsewhere)
            self.sr_cond_model = nn.ModuleDict({
                str(index): SampleRateCondition(layer.in_dim, config.sr_buckets, config.cond_type,
                                                config.cond_dim, config.cond_out_layer)
                for index, layer in enumerate(layers) if isinstance(layer, DecoderBlock)})

        # Streaming slots, in forward order: every layer that needs earlier frames.
        self.stream_layers = [m for m in self.model.modules()
                              if isinstance(m, (CausalConv, CausalUpConv)) and m.context > 0]
        for slot, layer in enumerate(self.stream_layers):
            layer.slot = slot

    def forward(self, latents: torch.Tensor, sample_rate: torch.Tensor | None = None,
                states: list[torch.Tensor] | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """latents (B, latent_dim, n) -> audio (B, 1, n * decode_chunk_size) in [-1, 1].

        sample_rate: the output rate to condition on, an integer tensor of shape (1,) or (B,) (only
        read when the config has sr_bin_boundaries; AudioVAE.decode passes out_sample_rate).
        states: None for a whole decode; for a stream, `new_states(B)` (updated in place).
        generator: the noise blocks' (use_noise_block only)."""
        bucket = torch.bucketize(sample_rate, self.sr_bin_boundaries) if self.conditioned else None
        x = latents
        for index, layer in enumerate(self.model):
            if isinstance(layer, DecoderBlock):
                if self.conditioned:
                    x = self.sr_cond_model[str(index)](x, bucket)
                x = layer(x, states, generator)
            elif isinstance(layer, Snake):
                x = layer(x)
            else:
                x = layer(x, states)
        return torch.tanh(x)

    def new_states(self, batch: int, device=None, dtype=None) -> list[torch.Tensor]:
        """Zeroed streaming states for a batch: what the first chunk's causal padding reads."""
        weight = self.model[0].weight
        device, dtype = device or weight.device, dtype or weight.dtype
        return [torch.zeros(layer.state_shape(batch), device=device, dtype=dtype) for layer in self.stream_layers]


class AudioVAE(nn.Module):
    """Encoder + decoder of one VoxCPM generation (`config.version`). Build with `load_audio_vae`."""

    def __init__(self, config: AudioVAEConfig):
        super().__init__()
        self.config = config
        self.encoder = VAEEncoder(config)
        self.decoder = VAEDecoder(config)

    # -- what the engine reads -------------------------------------------------------------------------

    @property
    def sample_rate(self) -> int:
        """The rate `encode` takes."""
        return self.config.encode_sample_rate

    @property
    def output_sample_rate(self) -> int:
        return self.config.output_sample_rate

    @property
    def chunk_size(self) -> int:
        return self.config.chunk_size

    @property
    def decode_chunk_size(self) -> int:
        return self.config.decode_chunk_size

    @property
    def latent_dim(self) -> int:
        return self.config.latent_dim

    @property
    def device(self) -> torch.device:
        return self.encoder.fc_mu.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.encoder.fc_mu.weight.dtype

    # -- encoding --------------------------------------------------------------------------------------

    @torch.no_grad()
    def encode(self, audio: torch.Tensor, sample_rate: int | None = None) -> torch.Tensor:
        """audio (B, T) or (B, 1, T) at `sample_rate` (None: the VAE's own) -> latents
        (B, latent_dim, ceil(T / chunk_size)): upstream's encode, zero-padding T on the right."""
        if sample_rate is not None and sample_rate != self.sample_rate:
            raise InputError(f"the VoxCPM VAE encodes {self.sample_rate} Hz audio, got {sample_rate} Hz: resample "
                             f"it first")
        if not isinstance(audio, torch.Tensor) or not audio.is_floating_point():
            raise InputError(f"audio must be a float tensor, got {_describe(audio)}")
        if audio.dim() == 2:
            audio = audio.unsqueeze(1)
        if audio.dim() != 3 or audio.shape[1] != 1:
            raise InputError(f"audio must be mono, (batch, samples) or (batch, 1, samples), got {tuple(audio.shape)}")
        if audio.shape[-1] == 0:
            raise InputError("audio is empty")
        audio = audio.to(device=self.device, dtype=self.dtype)
        length = audio.shape[-1]
        right = -length % self.chunk_size
        return self.encoder(nn.functional.pad(audio, (0, right)))

    # -- decoding --------------------------------------------------------------------------------------

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, sample_rate: int | torch.Tensor | None = None,
               generator: torch.Generator | None = None, decoder: Callable | None = None) -> torch.Tensor:
        """latents (B, latent_dim, n) -> audio (B, 1, n * decode_chunk_size) at output_sample_rate.

        sample_rate: v2 only, the rate the decoder is conditioned on (upstream's `sr_cond`; None: the
        config's out_sample_rate, as upstream). generator: for the noise blocks, if the config has
        them. decoder: this VAE's `decoder` or its compiled form."""
        latents = self._check_latents(latents)
        decoder = self.decoder if decoder is None else decoder  # (a compiled module has no truth value)
        return decoder(latents, self._rate_tensor(sample_rate), None, generator)

    def stream(self, sample_rate: int | torch.Tensor | None = None, generator: torch.Generator | None = None,
               decoder: Callable | None = None) -> "VAEStream":
        """A decoder for latent chunks as they come (upstream's v2 `streaming_decode()`)."""
        return VAEStream(self, self._rate_tensor(sample_rate), generator, decoder)

    def _rate_tensor(self, sample_rate) -> torch.Tensor | None:
        if not self.decoder.conditioned:
            return None  # upstream ignores sr_cond without boundaries
        if sample_rate is None:
            sample_rate = self.output_sample_rate
        if isinstance(sample_rate, torch.Tensor):
            if sample_rate.is_floating_point() or sample_rate.dim() > 1:
                raise InputError(f"sample_rate must be an integer or an integer tensor of shape (1,) or (batch,), "
                                 f"got {_describe(sample_rate)}")
            return sample_rate.to(self.device).reshape(-1)
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int):
            raise InputError(f"sample_rate must be an integer, got {sample_rate!r}")
        return torch.tensor([sample_rate], device=self.device, dtype=torch.int32)

    def _check_latents(self, latents) -> torch.Tensor:
        d = self.latent_dim
        if not isinstance(latents, torch.Tensor) or not latents.is_floating_point() or latents.dim() != 3 \
                or latents.shape[1] != d:
            raise InputError(f"latents must be a float tensor (batch, {d}, frames), got {_describe(latents)}")
        if latents.shape[-1] == 0:
            raise InputError("latents have no frames")
        return latents.to(device=self.device, dtype=self.dtype)


class VAEStream:
    """Decodes latent chunks one after the other, each call carrying every causal layer's last input
    frames to the next: `decode_chunk(latents (B, latent_dim, n)) -> audio (B, 1, n * decode_chunk_size)`.

    Chunk for chunk, this is upstream's `StreamingVAEDecoder.decode_chunk` (v2; for v1 upstream has no
    streaming decoder and re-decodes a window instead). The output differs from one whole decode by
    float rounding only: the transposed convs add the previous frame's contribution separately. The
    states are zeros until the first chunk fixes the batch size; `reset()` starts over.
    """

    def __init__(self, vae: AudioVAE, sample_rate: torch.Tensor | None, generator: torch.Generator | None = None,
                 decoder: Callable | None = None):
        self.vae, self.sample_rate, self.generator = vae, sample_rate, generator
        self.decoder = vae.decoder if decoder is None else decoder
        self.states: list[torch.Tensor] | None = None

    def reset(self) -> None:
        self.states = None

    @torch.no_grad()
    def decode_chunk(self, latents: torch.Tensor) -> torch.Tensor:
        latents = self.vae._check_latents(latents)
        if self.states is None:
            self.states = self.vae.decoder.new_states(latents.shape[0])
        elif self.states and self.states[0].shape[0] != latents.shape[0]:
            raise InputError(f"this stream decodes a batch of {self.states[0].shape[0]}, got a chunk of "
                             f"{latents.shape[0]}; reset() it to change the batch")
        return self.decoder(latents, self.sample_rate, self.states, self.generator)

    # `with vae.stream() as s:` reads like upstream's `with vae.streaming_decode() as dec:`
    def __enter__(self) -> "VAEStream":
        self.reset()
        return self

    def __exit__(self, *exc) -> None:
        self.reset()


# ---------------------------------------------------------------------------------------------------
# Loading


def checkpoint_layout(config: AudioVAEConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of an upstream VAE checkpoint for `config` -> its shape (weight-normed convs as
    `weight_g` (channels, 1, 1) and `weight_v`), in our modules' order: 243 tensors for the v1
    defaults, 312 for the v2 defaults (with the int32 `decoder.sr_bin_boundaries`), as many as
    upstream's state dicts have and the released VoxCPM2 audiovae.pth holds."""
    with torch.device("meta"):
        model = AudioVAE(config)
    layout: dict[str, tuple[int, ...]] = {}
    for key, tensor in _our_tensors(model).items():
        if _is_folded(model, key):
            base = key[: -len("weight")]
            layout[base + "weight_g"] = (tensor.shape[0],) + (1,) * (tensor.dim() - 1)
            layout[base + "weight_v"] = tuple(tensor.shape)
        else:
            layout[key] = tuple(tensor.shape)
    fc_mu = {k[len("encoder.fc_mu."):]: v for k, v in layout.items() if k.startswith("encoder.fc_mu.")}
    layout.update({OPTIONAL_PREFIX + k: v for k, v in fc_mu.items()})
    return layout


def load_audio_vae(state: Mapping[str, torch.Tensor], config: AudioVAEConfig, device="cpu",
                   dtype: torch.dtype = torch.float32, source: str = "audiovae") -> AudioVAE:
    """The VAE of `config` with the tensors of an upstream checkpoint (`state`: its raw state dict, or a
    dict holding it under "state_dict" as audiovae.pth does), on `device` in `dtype`.

    Each conv's weight is folded from weight_g / weight_v with torch._weight_norm on `device` in
    float32, as upstream's hook computes it before every call there; then cast to `dtype` (upstream
    always runs its VAE in float32). `source` names the file in error messages."""
    state = _unwrap(state, source)
    with torch.device("meta"):
        model = AudioVAE(config)
    expected = _our_tensors(model)
    tensors: dict[str, torch.Tensor] = {}
    missing, used = [], set()

    def take(key: str, shape: tuple[int, ...], kind: torch.dtype) -> torch.Tensor | None:
        if key not in state:
            missing.append(key)
            return None
        value = state[key]
        used.add(key)
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{source}: {key} is a {type(value).__name__}, not a tensor")
        if tuple(value.shape) != tuple(shape):
            raise CheckpointError(f"{source}: {key} has shape {tuple(value.shape)}, the audio_vae_config implies "
                                  f"{tuple(shape)}")
        # adopted when already of the device and dtype: read_audio_vae_weights gives fresh allocations,
        # aligned as upstream's own parameters are (a memory-mapped view could round differently)
        return value.to(device=device, dtype=kind)

    for key, meta in expected.items():
        if _is_folded(model, key):
            base = key[: -len("weight")]
            g = take(base + "weight_g", (meta.shape[0],) + (1,) * (meta.dim() - 1), torch.float32)
            v = take(base + "weight_v", tuple(meta.shape), torch.float32)
            if g is not None and v is not None:
                tensors[key] = torch._weight_norm(v, g, 0).to(dtype)
        elif key == BOUNDARIES and key not in state:
            tensors[key] = torch.tensor(config.sr_bin_boundaries, dtype=torch.int32, device=device)
        else:
            value = take(key, tuple(meta.shape), meta.dtype if not meta.is_floating_point() else torch.float32)
            if value is not None:
                tensors[key] = value.to(dtype) if value.is_floating_point() else value
    used.update(k for k in state if k.startswith(OPTIONAL_PREFIX))
    unexpected = sorted(set(state) - used)
    if missing or unexpected:
        detail = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"{source} does not fit its audio_vae_config ({detail}; {len(missing)} missing, "
                              f"{len(unexpected)} unexpected tensors)")
    model.load_state_dict(tensors, assign=True)
    return model.eval().requires_grad_(False)


def read_audio_vae_weights(folder: Path | str) -> tuple[dict[str, torch.Tensor], Path]:
    """The raw VAE state dict of a VoxCPM model folder and the file it came from: audiovae.safetensors
    if present, else audiovae.pth (read with weights_only=True, unwrapped from "state_dict")."""
    folder = Path(folder)
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return read_checkpoint(folder / name), folder / name
    raise CheckpointError(f"{folder} holds neither {' nor '.join(WEIGHT_FILES)}: the VoxCPM AudioVAE is missing")


def _unwrap(state, source: str) -> Mapping[str, torch.Tensor]:
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{source} does not hold a state dict (got {type(state).__name__})")
    return state


def _our_tensors(model: AudioVAE) -> dict[str, torch.Tensor]:
    return dict(model.state_dict(keep_vars=True))


def _is_folded(model: AudioVAE, key: str) -> bool:
    """Whether `key` is a weight-normed conv's weight (stored as weight_g / weight_v)."""
    if not key.endswith(".weight"):
        return False
    module = model.get_submodule(key[: -len(".weight")])
    return isinstance(module, (CausalConv, CausalUpConv))


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} of shape {tuple(value.shape)}"
    return type(value).__name__


__all__ = ["AudioVAE", "AudioVAEConfig", "AudioVAEV2Config", "NoiseBlock", "VAEStream", "checkpoint_layout",
           "load_audio_vae", "read_audio_vae_weights"]
