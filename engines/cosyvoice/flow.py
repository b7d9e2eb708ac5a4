"""CosyVoice's flow: speech tokens + the prompt's tokens, mel and speaker embedding -> the mel of the new tokens
(upstream's cosyvoice/flow/flow.py CausalMaskedDiffWithXvec / CausalMaskedDiffWithDiT `.inference` and
flow_matching.py's CausalConditionalCFM).

    embedding (B, 192) -> normalised -> spk_embed_affine_layer -> spks (B, 80)
    [prompt tokens, tokens] -> input_embedding (x the padding mask)
      CosyVoice 2: the Conformer encoder (x2 upsampling) -> encoder_proj -> mu (B, 2T, 80)
      CosyVoice 3: the pre-look-ahead layer, then each token repeated token_mel_ratio times -> mu
    cond = the prompt's mel over its frames, zero after
    the CFM: 10 Euler steps from fixed noise over t = 1 - cos(pi/2 * i/10), classifier-free guidance 0.7 (a batch
    of two: the conditioned row and one with mu, spks and cond zeroed), the U-Net (CV2) or the DiT (CV3) as the
    velocity -> the mel after the prompt's frames

The noise is not drawn per request: upstream's CausalConditionalCFM seeds the global generator with 0 at
construction and keeps randn(1, 80, 15000); every request slices it. It is rebuilt here from a generator of its
own seeded 0 (the same numbers), so loading a model changes no one's random state. Streaming (not the last
chunk: `finalize` False) holds back the last `pre_lookahead_len` tokens as the look-ahead context.

The solve has fixed shapes for a frame count and reads nothing back to the host, so the engine replays it as one
CUDA graph per frame count (`SolveGraphs`, kept with the loaded model); on the CPU it runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import InputError
from mizuoto.runtime.graphs import GraphedCall, Graphs

from .conformer import EncoderConfig, PreLookaheadLayer, UpsampleConformerEncoder
from .dit import DiT, DiTConfig
from .masks import valid_frames
from .unet import CausalConditionalDecoder, UNetConfig

NOISE_FRAMES = 50 * 300  # CausalConditionalCFM's rand_noise: 300 s of 50 Hz frames
NOISE_SEED = 0  # set_all_random_seed(0) before it is drawn
MEL_BANDS = 80  # hard-coded in upstream's solver (its batch-of-two buffers)
STEPS = 10  # the flow's n_timesteps
CFG_RATE = 0.7  # inference_cfg_rate of both released yamls


def fixed_noise(device=None, dtype=torch.float32) -> torch.Tensor:
    """upstream's rand_noise (1, 80, 15000): torch.randn after torch.manual_seed(0), from a private generator."""
    generator = torch.Generator().manual_seed(NOISE_SEED)
    return torch.randn([1, MEL_BANDS, NOISE_FRAMES], generator=generator).to(device=device, dtype=dtype)


def cosine_times(steps: int, device=None, dtype=torch.float32) -> torch.Tensor:
    t = torch.linspace(0, 1, steps + 1, device=device, dtype=dtype)
    return 1 - torch.cos(t * 0.5 * torch.pi)


class CausalConditionalCFM(nn.Module):
    """The flow-matching solver; `estimator` is the U-Net (CV2) or the DiT (CV3) (keys decoder.estimator.*)."""

    def __init__(self, estimator: nn.Module, cfg_rate: float = CFG_RATE):
        super().__init__()
        self.estimator = estimator
        self.inference_cfg_rate = cfg_rate
        self._noise: torch.Tensor | None = None

    def noise(self, frames: int, like: torch.Tensor) -> torch.Tensor:
        if frames > NOISE_FRAMES:
            raise InputError(f"the flow's fixed noise covers {NOISE_FRAMES} frames ({NOISE_FRAMES // 50} s); "
                             f"this request needs {frames}: speak a shorter text")
        noise = self._noise
        if noise is None or noise.device != like.device:
            noise = self._noise = fixed_noise(like.device)
        return noise[:, :, :frames].to(like.dtype)

    @torch.inference_mode()
    def forward(self, mu, mask, spks, cond, n_timesteps: int = STEPS, temperature: float = 1.0,
                streaming: bool = False, before_step: Callable[[], None] | None = None) -> torch.Tensor:
        """mu, cond (1, 80, T), mask (1, 1, T), spks (1, 80) -> the mel (1, 80, T), float32."""
        z = self.noise(mu.size(2), mu) * temperature
        t_span = cosine_times(n_timesteps, mu.device, mu.dtype)
        return self.solve_euler(z, t_span, mu, mask, spks, cond, streaming, before_step)

    def solve_euler(self, x, t_span, mu, mask, spks, cond, streaming, before_step=None):
        """upstream's solver: the conditioned and unconditioned rows as one batch of two, written into buffers of
        spks' dtype; t advances by dt and dt is the next gap measured from the advanced t (as upstream)."""
        t, dt = t_span[0].unsqueeze(0), t_span[1] - t_span[0]
        frames, dtype = x.size(2), spks.dtype
        x_in = torch.zeros([2, MEL_BANDS, frames], device=x.device, dtype=dtype)
        mask_in = torch.zeros([2, 1, frames], device=x.device, dtype=dtype)
        mu_in = torch.zeros([2, MEL_BANDS, frames], device=x.device, dtype=dtype)
        t_in = torch.zeros([2], device=x.device, dtype=dtype)
        spks_in = torch.zeros([2, MEL_BANDS], device=x.device, dtype=dtype)
        cond_in = torch.zeros([2, MEL_BANDS, frames], device=x.device, dtype=dtype)
        rate = self.inference_cfg_rate
        for step in range(1, len(t_span)):
            if before_step is not None:
                before_step()
            x_in[:] = x
            mask_in[:] = mask
            mu_in[0] = mu
            t_in[:] = t.unsqueeze(0)
            spks_in[0] = spks
            cond_in[0] = cond
            v = self.estimator(x_in, mask_in, mu_in, t_in, spks_in, cond_in, streaming=streaming)
            v, v_uncond = torch.split(v, [x.size(0), x.size(0)], dim=0)
            v = (1.0 + rate) * v - rate * v_uncond
            x = x + dt * v
            t = t + dt
            if step < len(t_span) - 1:
                dt = t_span[step + 1] - t
        return x.float()


class SolveGraphs:
    """The CFM's whole solve (10 Euler steps of the estimator, guidance and update) as one CUDA graph per
    (frames, streaming, dtype) and attention policy (runtime.graphs.GraphedCall); eager where `graphs` is None.

    The solve reads nothing back to the host and draws nothing (its noise is the fixed table, built by the
    capture's warm-up before the capture), so a replay is the eager solve's kernels: the same mel. A graphed
    solve checks for cancellation once before it, not between its steps. Keep it with the loaded model: its
    graphs hold the weights' addresses."""

    def __init__(self, cfm: CausalConditionalCFM, graphs: Graphs | None):
        self.cfm, self.graphs = cfm, graphs
        self.call = GraphedCall(lambda mu, mask, spks, cond, generator, streaming:
                                cfm(mu, mask, spks, cond, streaming=streaming), graphs)

    def __call__(self, mu, mask, spks, cond, streaming: bool, generator: torch.Generator,
                 before_step: Callable[[], None] | None = None) -> torch.Tensor:
        if self.graphs is None:
            return self.cfm(mu, mask, spks, cond, streaming=streaming, before_step=before_step)
        if before_step is not None:
            before_step()
        return self.call((mu, mask, spks, cond), generator, streaming=streaming)


@dataclass(frozen=True)
class FlowConfig:
    version: int  # 2: CausalMaskedDiffWithXvec (Conformer + U-Net), 3: CausalMaskedDiffWithDiT
    input_size: int = 512  # the token embedding's width (CV3: 80)
    output_size: int = MEL_BANDS
    spk_embed_dim: int = 192
    vocab_size: int = 6561
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    pre_lookahead_channels: int = 1024  # CV3's PreLookaheadLayer width
    encoder: EncoderConfig | None = None
    unet: UNetConfig | None = None
    dit: DiTConfig | None = None
    cfg_rate: float = CFG_RATE  # the CFM's inference_cfg_rate


class Flow(nn.Module):
    """CausalMaskedDiffWithXvec (version 2) or CausalMaskedDiffWithDiT (version 3), for inference."""

    def __init__(self, config: FlowConfig):
        super().__init__()
        self.config = config
        self.input_embedding = nn.Embedding(config.vocab_size, config.input_size)
        self.spk_embed_affine_layer = nn.Linear(config.spk_embed_dim, config.output_size)
        if config.version == 2:
            self.encoder = UpsampleConformerEncoder(config.encoder or EncoderConfig())
            self.encoder_proj = nn.Linear(self.encoder.config.size, config.output_size)
            estimator = CausalConditionalDecoder(config.unet or UNetConfig())
        elif config.version == 3:
            self.pre_lookahead_layer = PreLookaheadLayer(config.input_size, config.pre_lookahead_channels,
                                                         config.pre_lookahead_len)
            estimator = DiT(config.dit or DiTConfig())
        else:
            raise ValueError(f"CosyVoice flow version must be 2 or 3, got {config.version}")
        self.decoder = CausalConditionalCFM(estimator, config.cfg_rate)

    def condition(self, token, token_len, prompt_token, prompt_token_len, embedding, finalize: bool,
                  streaming: bool):
        """Everything before the solver: -> (mu (1, T, 80), spks (1, 80))."""
        # a float32 embedding (the reference's CAM++) meets half weights as upstream's autocast would cast it
        embedding = self.spk_embed_affine_layer(F.normalize(embedding, dim=1).to(self.spk_embed_affine_layer.weight))
        token, token_len = torch.concat([prompt_token, token], dim=1), prompt_token_len + token_len
        mask = valid_frames(token_len, token.size(1)).unsqueeze(-1).to(embedding)
        token = self.input_embedding(torch.clamp(token, min=0)) * mask
        look = self.config.pre_lookahead_len
        context = None if finalize else token[:, -look:]
        body = token if finalize else token[:, :-look]
        if self.config.version == 2:
            h = self.encoder_proj(self.encoder(body, token_len, context=context, streaming=streaming))
        else:
            h = self.pre_lookahead_layer(body, context=context).repeat_interleave(self.config.token_mel_ratio, dim=1)
        return h, embedding

    @torch.inference_mode()
    def inference(self, token, token_len, prompt_token, prompt_token_len, prompt_feat, embedding,
                  streaming: bool = False, finalize: bool = True,
                  before_step: Callable[[], None] | None = None, solve: SolveGraphs | None = None,
                  generator: torch.Generator | None = None) -> torch.Tensor:
        """token (1, N), prompt_token (1, P) with their lengths (1,), prompt_feat (1, F, 80), embedding (1, 192)
        -> the mel of the new tokens (1, 80, frames - F), float32. `solve`: this flow's SolveGraphs (the
        request's `generator` beside it), else the eager solver."""
        if token.shape[0] != 1:
            raise InputError(f"the flow renders one request at a time, got a batch of {token.shape[0]}")
        h, spks = self.condition(token, token_len, prompt_token, prompt_token_len, embedding, finalize, streaming)
        prompt_frames = prompt_feat.shape[1]
        frames = h.shape[1]
        if prompt_frames > frames:
            raise InputError(f"the prompt's mel has {prompt_frames} frames, more than its {frames} token frames: "
                             "the prompt's tokens and mel must come from the same audio")
        conds = torch.zeros([1, frames, self.config.output_size], device=h.device).to(h.dtype)
        conds[:, :prompt_frames] = prompt_feat
        mask = torch.ones(1, 1, frames, device=h.device, dtype=h.dtype)
        mu, conds = h.transpose(1, 2).contiguous(), conds.transpose(1, 2)
        if solve is None:
            feat = self.decoder(mu, mask, spks, conds, STEPS, streaming=streaming, before_step=before_step)
        else:
            feat = solve(mu, mask, spks, conds, streaming, generator, before_step)
        return feat[:, :, prompt_frames:].float()
