"""GPT-SoVITS v3/v4's conditional flow matching: `module/models.py::CFM.inference` and its estimator
`f5_tts/model/backbones/dit.py::DiT` (with `f5_tts/model/modules.py`) at RVC-Boss/GPT-SoVITS 48b1a01 (MIT). v5's
solver (cfm_v5.py) runs the same DiT without d_embed, through static_condition / embed_static (its static cache).

    features mu (B, T, 512) ─ TextEmbedding (sinusoidal positions, ConvNeXt-V2 blocks; no token table) ─┐
    noisy mel x, prompt mel (B, 100, T) ─────────────────────────────────────── InputEmbedding ─────────┴─ h
    time t ─ time_embed ─┐
    step d ─ d_embed ────┴─ + ─ the AdaLN conditioning of every block
    h ─ DiTBlock × depth (AdaLN-zero attention with RoPE on head 0, key-padding mask; GELU-tanh FFN)
      ─ AdaLayerNormZero_Final ─ proj_out ─ the velocity (B, T, 100)

`CFM.inference` is upstream's: noise x = randn(B, 100, T) * temperature (one draw, from the request's generator:
the same bits as upstream's draw from the global generator seeded alike), the prompt's frames put in the condition
and zeroed in x, then n uniform Euler steps x += d * v from t = 0 (t accumulated as a Python float, as upstream),
the prompt's frames of x zeroed again after each step. The text embedding and the d embedding are computed once
(upstream's use_conditioner_cache); with inference_cfg_rate > 1e-5 a second forward without the prompt and with
zeroed features gives v + (v - v_null) * rate (a separate batch, as upstream: packing the two would change the
bits). Upstream instantiates DiT(dim=1024, depth=22, heads=16, ff_mult=2, text_dim=512, conv_layers=4) for v3 and
v4 alike; `cfm_from_state` reads the sizes from a checkpoint's `cfm.estimator.*` entries, whose names are
upstream's.

The blocks are F5-TTS's (mizuoto/nn/f5_dit.py: GPT-SoVITS vendors an older copy of f5-tts's modules); what this
copy does differently is here:
- RoPE is applied by x-transformers' apply_rotary_pos_emb to the whole (heads * dim_head) query and key *before*
  the head split, with a table of dim_head frequencies: only the first dim_head channels, head 0, are rotated
  (F5-TTS's pe_attn_head = 1 does the same after the split);
- the attention mask comes from x_lens (sequence_mask): padded keys are masked (upstream expands it to
  (B, heads, T, T)), and the attention output of padded frames is zeroed after `to_out`; upstream's pipeline
  passes x_lens = [T] (one entry for the whole batch, so nothing is padded);
- a second TimestepEmbedding, `d_embed`, of the step size is added to the time embedding;
- the text encoder takes continuous features (no embedding table, no filler mask) and its 4096-row position
  table repeats its last row beyond.

Speed: the DiT between two attention calls replays as CUDA graph segments (runtime.graphs.LayerSteps) when a
`Graphs` is given: a chunk's solver loop has the same shapes at every step, so the graphs captured at its first
step serve the others (captured again per call: each chunk may have its own length). Attention, the Euler update
and the prompt reset run eagerly between and after them. Without graphs the same segments run eagerly: the same
operations, so the same bits either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.f5_dit import (
    AdaLayerNormFinal,
    ConvNeXtV2Block,
    InputEmbedding,
    MaskedDiTBlock,
    RotaryEmbedding,
    TimestepEmbedding,
    sinusoidal_table,
)
from mizuoto.runtime import accel
from mizuoto.runtime.graphs import Graphs, LayerSteps

# bidirectional over every real frame of a chunk, a diffusion step: approximate kernels are acceptable
ATTENTION = accel.Site("gpt_sovits.cfm")

PREFIX = "cfm.estimator."  # where SynthesizerTrnV3's state keeps the DiT
TEXT_POSITIONS = 4096  # the text encoder's position table (upstream: "~44s of 24khz audio")
CFG_THRESHOLD = 1e-5  # upstream runs the second forward when inference_cfg_rate > this


@dataclass(frozen=True)
class CFMConfig:
    """The DiT's constructor arguments (upstream's names; its defaults are SynthesizerTrnV3's)."""

    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: float = 2
    text_dim: int = 512
    conv_layers: int = 4
    mel_dim: int = 100  # also the CFM's in_channels
    step_embedding: bool = True  # d_embed; v5's DiT has none (use_step_embedding=False)

    def to_dict(self) -> dict:
        return asdict(self)


class TextEmbedding(nn.Module):
    """Features (B, T, text_dim) -> (B, T, text_dim): plus fixed positions (the last one repeated past 4096), then
    the ConvNeXt-V2 blocks; zeroed first for the unconditional forward (drop_text). No blocks: the features as
    they are."""

    def __init__(self, text_dim: int, conv_layers: int, conv_mult: int = 2):
        super().__init__()
        self.text_blocks = nn.Sequential(*[ConvNeXtV2Block(text_dim, text_dim * conv_mult)
                                           for _ in range(conv_layers)])
        if conv_layers:
            self.register_buffer("freqs_cis", sinusoidal_table(text_dim, TEXT_POSITIONS), persistent=False)

    def forward(self, text: torch.Tensor, length: int, drop_text: bool = False) -> torch.Tensor:
        if drop_text:
            text = torch.zeros_like(text)
        if len(self.text_blocks):
            positions = torch.arange(length, device=self.freqs_cis.device).clamp(max=TEXT_POSITIONS - 1)
            text = self.text_blocks(text + self.freqs_cis[positions])
        return text


class DiT(nn.Module):
    """GPT-SoVITS's DiT (the CFM's estimator), upstream's module names."""

    def __init__(self, config: CFMConfig):
        super().__init__()
        self.config = config
        self.time_embed = TimestepEmbedding(config.dim)
        self.d_embed = TimestepEmbedding(config.dim) if config.step_embedding else None
        self.text_embed = TextEmbedding(config.text_dim, config.conv_layers)
        self.input_embed = InputEmbedding(config.mel_dim, config.text_dim, config.dim)
        self.rotary_embed = RotaryEmbedding(config.dim_head)
        # rotated_heads=1: upstream rotates the first dim_head channels of the unsplit projections, i.e. head 0
        self.transformer_blocks = nn.ModuleList(
            MaskedDiTBlock(config.dim, config.heads, config.dim_head, config.ff_mult, ATTENTION, rotated_heads=1)
            for _ in range(config.depth))
        self.norm_out = AdaLayerNormFinal(config.dim)
        self.proj_out = nn.Linear(config.dim, config.mel_dim)

    def segments(self) -> list:
        """The layers as LayerSteps sees them (before / attend / after)."""
        return list(self.transformer_blocks)

    def positions(self, x_lens: torch.Tensor, batch: int, frames: int, device) -> tuple[tuple, tuple]:
        """What every block reads besides the state: pos (RoPE cos, sin, padded frames (b, T, 1)) and the
        attention's index (upstream's dense mask (B, heads, T, T), its MaskInfo). `x_lens` has B entries or one
        for the whole batch (upstream's pipeline passes [T]); True in the mask = a real key."""
        lengths = x_lens.to(device)
        keep = torch.arange(frames, dtype=lengths.dtype, device=device)[None] < lengths[:, None]  # sequence_mask
        dense = keep[:, None, None, :].expand(batch, self.config.heads, frames, frames)
        info = accel.MaskInfo(keep.expand(batch, frames), padding="right")
        return (*self.rotary_embed.tables(frames), ~keep[..., None]), (dense, info)

    def embed(self, x, cond, text, time, dt):
        """Segment 0's head: x, cond (B, mel, T) and the text embedding (B, T, text_dim) -> the transformer's
        input; time (B,) with the step's embedding dt (B, dim) -> the conditioning."""
        t = self.time_embed(time) + dt
        return self.input_embed(x.transpose(2, 1), cond.transpose(2, 1), text), t

    def static_condition(self, cond: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """v5's prepare_static_cache: the input projection's part that stays fixed over the solver, cond (B, mel, T)
        and the text embedding through proj's columns after the noisy mel's, with the bias -> (B, T, dim)."""
        proj = self.input_embed.proj
        return F.linear(torch.cat((cond.transpose(2, 1), text), dim=-1), proj.weight[:, self.config.mel_dim:],
                        proj.bias)

    def embed_static(self, x, static, time):
        """v5's segment-0 head: x (B, mel, T) through proj's first mel_dim columns (the same strided slice upstream
        multiplies by: another split of the product rounds differently) plus the static part, then the convolutional
        positions (upstream masks them with x_lens, which covers every frame); time (B,) -> the conditioning, with
        no step embedding."""
        proj = self.input_embed.proj
        h = F.linear(x.transpose(2, 1), proj.weight[:, :x.shape[1]]) + static
        return self.input_embed.conv_pos_embed(h) + h, self.time_embed(time)

    def finish(self, state) -> torch.Tensor:
        x, t = state
        return self.proj_out(self.norm_out(x, t))

    def forward(self, x, cond, x_lens, time, d, text, drop_audio_cond: bool = False,
                drop_text: bool = False) -> torch.Tensor:
        """upstream's DiT.forward without caches: x, cond (B, mel, T), time and d (B,) or scalars, text (B,
        text_dim, T) -> the velocity (B, T, mel)."""
        batch, frames = x.shape[0], x.shape[2]
        if time.ndim == 0:
            time = time.repeat(batch)
        if drop_audio_cond:
            cond = torch.zeros_like(cond)
        pos, index = self.positions(x_lens, batch, frames, x.device)
        text_embed = self.text_embed(text.transpose(2, 1), frames, drop_text=drop_text)
        return LayerSteps(self.segments(), self.embed, self.finish)((x, cond, text_embed, time, self.d_embed(d)),
                                                                   pos, index)


class CFM(nn.Module):
    """upstream's CFM for inference: `estimator` is the DiT (state keys cfm.estimator.*)."""

    def __init__(self, config: CFMConfig):
        super().__init__()
        self.config = config
        self.in_channels = config.mel_dim
        self.estimator = DiT(config)

    @torch.inference_mode()
    def inference(self, mu: torch.Tensor, x_lens: torch.Tensor, prompt: torch.Tensor, n_timesteps: int,
                  temperature: float = 1.0, inference_cfg_rate: float = 0.0, *,
                  generator: torch.Generator | None = None, graphs: Graphs | None = None,
                  before_step: Callable[[], None] | None = None) -> torch.Tensor:
        """Features mu (B, T, text_dim), x_lens (B,) or (1,), the prompt's mel (1 or B, mel, P) -> the mel
        (B, mel, T), its first P frames zero.

        `generator`: the noise's (None: the global generator, as upstream); `graphs`: replay the DiT's segments
        as CUDA graphs; `before_step()` runs before every Euler step (cancellation)."""
        est = self.estimator
        batch, frames = mu.size(0), mu.size(1)
        prompt_len = prompt.size(-1)
        if mu.ndim != 3 or mu.shape[2] != self.config.text_dim:
            raise InputError(f"the CFM's features must be (B, T, {self.config.text_dim}), got {tuple(mu.shape)}")
        if prompt_len > frames:
            raise InputError(f"the CFM's prompt has {prompt_len} frames, more than the {frames} it generates")
        if n_timesteps < 1:
            raise InputError(f"the CFM needs at least one step, got {n_timesteps}")
        device, dtype = mu.device, mu.dtype
        x = torch.randn([batch, self.in_channels, frames], device=device, dtype=dtype, generator=generator) \
            * temperature
        prompt_x = torch.zeros_like(x, dtype=dtype)
        prompt_x[..., :prompt_len] = prompt[..., :prompt_len]
        x[..., :prompt_len] = 0
        d = 1 / n_timesteps
        d_tensor = torch.ones(batch, device=device, dtype=dtype) * d
        dt = est.d_embed(d_tensor)  # upstream's dt_cache and text_cache: the first forward's, kept
        text = est.text_embed(mu, frames)
        guided = inference_cfg_rate > CFG_THRESHOLD
        if guided:
            null_text, null_cond = est.text_embed(mu, frames, drop_text=True), torch.zeros_like(prompt_x)
        pos, index = est.positions(x_lens, batch, frames, device)
        layers = LayerSteps(est.segments(), est.embed, est.finish, graphs)
        t = 0
        for _ in range(n_timesteps):
            if before_step is not None:
                before_step()
            t_tensor = torch.ones(batch, device=device, dtype=dtype) * t
            v_pred = layers((x, prompt_x, text, t_tensor, dt), pos, index)
            if guided:
                v_pred = v_pred.clone()  # with graphs, the next call rewrites its static output
                neg = layers((x, null_cond, null_text, t_tensor, dt), pos, index)
                v_pred = v_pred + (v_pred - neg) * inference_cfg_rate
            x = x + d * v_pred.transpose(2, 1)
            t = t + d
            x[:, :, :prompt_len] = 0
        return x


def cfm_config_from_state(state: dict, what: str) -> CFMConfig:
    """The DiT's sizes from SynthesizerTrnV3's `cfm.estimator.*` entries; `what` names the file in errors."""

    def entry(name: str) -> torch.Tensor:
        value = state.get(PREFIX + name)
        if value is None:
            raise CheckpointError(f"{what} has no {PREFIX}{name}: it is not a v3/v4 SoVITS model, or it is damaged")
        return value

    if PREFIX + "long_skip_connection.weight" in state:
        raise CheckpointError(f"{what} has a CFM with a long skip connection, which no v3/v4 model has")
    proj_out = entry("proj_out.weight")
    mel_dim, dim = proj_out.shape

    def count(folder: str, leaf: str) -> int:
        return sum(1 for k in state if k.startswith(PREFIX + folder) and k.endswith(leaf))

    depth = count("transformer_blocks.", ".attn_norm.linear.weight")
    conv_layers = count("text_embed.text_blocks.", ".dwconv.weight")
    inv_freq = state.get(PREFIX + "rotary_embed.inv_freq")
    dim_head = 2 * inv_freq.shape[0] if inv_freq is not None else CFMConfig.dim_head
    inner = entry("transformer_blocks.0.attn.to_q.weight").shape[0] if depth else dim_head * CFMConfig.heads
    if depth == 0 or inner % dim_head:
        raise CheckpointError(f"{what}'s CFM has {depth} blocks of width {inner} over heads of {dim_head}; "
                              f"the file is damaged")
    ff_inner = entry("transformer_blocks.0.ff.ff.0.0.weight").shape[0]
    text_dim = entry("input_embed.proj.weight").shape[1] - 2 * mel_dim
    return CFMConfig(dim=dim, depth=depth, heads=inner // dim_head, dim_head=dim_head,
                     ff_mult=ff_inner / dim if ff_inner % dim else ff_inner // dim, text_dim=text_dim,
                     conv_layers=conv_layers, mel_dim=mel_dim,
                     step_embedding=PREFIX + "d_embed.time_mlp.0.weight" in state)


def cfm_from_state(state: dict, what: str) -> CFM:
    """An (unloaded) CFM sized for a SynthesizerTrnV3 state; the caller loads the state into its synthesizer."""
    return CFM(cfm_config_from_state(state, what))
