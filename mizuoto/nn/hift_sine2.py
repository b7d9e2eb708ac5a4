"""CosyVoice 2 and 3's HiFT source: upstream's `SineGen2` inside `SourceModuleHnNSF` (sinegen_type '2').

Exact to FunAudioLLM/CosyVoice ace7c47 `cosyvoice/hifigan/generator.py` (Apache-2.0; read, not copied). CosyVoice's
HiFTGenerator and CausalHiFTGenerator take this source whenever `sampling_rate != 22050` (CosyVoice 2 and 3 run at
24 kHz); Seed-VC's HiFT keeps `SineGen` (hift.SourceModule). Unlike SineGen, SineGen2 integrates the phase at the
frame rate:

    f0 per sample (B, L, 1) -> each harmonic's cycles per sample, (f0 * k / sampling_rate) % 1   (B, L, H)
      -> a random start phase (cycles) added to the first sample of every harmonic but the fundamental
      -> linear interpolation down by the samples per frame (one value per frame), cumulative sum, * 2 pi
      -> times the samples per frame, interpolated back up (linear; nearest when causal), sin, * nsf_alpha
      -> * voiced (f0 > nsf_voiced_threshold) + noise (std nsf_sigma voiced, nsf_alpha / 3 unvoiced)
      -> Linear over the H harmonics, tanh                                          excitation (B, 1, L)

Random draws, non-causal (CosyVoice 2): the start phases `rand(B, H)` on the signal's device, then the sine noise
`randn_like` of the (B, L, H) sines (a transposed layout: upstream's sines come out of a transpose, so the draw
fills them in their memory order), then the source module's unused noise branch `randn_like` (B, L, 1). Ours makes
the same draws, same shapes, layouts, dtype and order, all from one explicit `generator` on the signal's device, so
a seeded generator gives upstream's numbers under `torch.manual_seed` and leaves the same state after.

Causal (CosyVoice 3): no draw at run time. Upstream draws fixed tables once, in the constructor, from the global
CPU generator: start phases `rand(1, 9)` (the fundamental's then zeroed), sine noise `rand(1, 300 * 24000, 9)`
(uniform, not Gaussian), then the Linear's own init, then an unused noise branch `rand(1, 300 * 24000, 1)` (about
290 MB together). `CausalNoise` holds only the CPU generator's state where those draws began: CPU uniform draws
are serial (one 32-bit word per float32, in memory order), so any prefix of the sine table is the same draw with
fewer rows. It makes the phases and as many rows as a call needs, on the call's device, and keeps them (growing
by doubling) for the next call; the unused branch is never made. `CausalNoise.capture(generator)` takes the state
of a generator standing where upstream's constructor began and advances it past every draw of that constructor;
`hift_causal.cosyvoice3_noise` replays what CosyVoice 3's yaml builds before it, from the seed 0 its flow sets.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import InputError
from mizuoto.nn import ops

TABLE_ROWS = 300 * 24000  # upstream's table length: 300 s at 24 kHz, whatever the config
TABLE_WIDTH = 9  # upstream's tables have 9 columns (nb_harmonics 8 + 1), whatever the config
_FIRST_ROWS = 10 * 24000  # the first table made: 10 s, then doubled as calls need


def _check_generator(generator, device: torch.device) -> None:
    if not isinstance(generator, torch.Generator):
        raise InputError(f"HiFT's SineGen2 source draws its phases and noise at random: pass a torch.Generator "
                         f"(got {type(generator).__name__})")
    if generator.device.type != device.type:
        raise InputError(f"HiFT's SineGen2 source draws on {device.type} (the signal's device), but the generator "
                         f"given is on {generator.device.type}")


def _uniform_draws(generator: torch.Generator, count: int, chunk: int = 1 << 22) -> None:
    """Advance a CPU generator by `count` float32 uniform draws (as one rand of that many elements would)."""
    while count > 0:
        torch.rand(min(chunk, count), generator=generator)
        count -= chunk


class CausalNoise:
    """The fixed tables of upstream's causal SineGen2, made lazily from the CPU generator state they began at."""

    def __init__(self, state: torch.Tensor):
        if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.dim() != 1:
            raise InputError("CausalNoise takes a CPU torch.Generator's state (a uint8 tensor from get_state())")
        self.state = state.clone()
        self._phases: dict[torch.device, torch.Tensor] = {}
        self._tables: dict[torch.device, torch.Tensor] = {}

    @classmethod
    def capture(cls, generator: torch.Generator, advance: bool = True) -> CausalNoise:
        """The tables upstream's causal SourceModuleHnNSF would draw with its global generator standing where
        `generator` stands. With `advance`, `generator` is then moved past all of that constructor's draws (the
        phases, the sine table, the Linear(9, 1)'s init, the unused noise table): where upstream's global generator
        is once the module is built (about 0.4 s of draws; nothing is kept)."""
        if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
            raise InputError("upstream draws the causal noise tables on the CPU: pass a CPU torch.Generator")
        noise = cls(generator.get_state())
        if advance:
            _uniform_draws(generator, TABLE_WIDTH + TABLE_ROWS * TABLE_WIDTH)
            linear = torch.empty(1, TABLE_WIDTH)  # nn.Linear(9, 1)'s init: kaiming_uniform_, then the bias
            linear.uniform_(-1.0, 1.0, generator=generator)
            torch.empty(1).uniform_(-1.0, 1.0, generator=generator)
            _uniform_draws(generator, TABLE_ROWS)
        return noise

    def _make(self, rows: int, device: torch.device) -> None:
        generator = torch.Generator().set_state(self.state)
        phases = torch.rand(1, TABLE_WIDTH, generator=generator)
        phases[:, 0] = 0
        table = torch.rand(1, rows, TABLE_WIDTH, generator=generator)
        self._phases[device], self._tables[device] = phases.to(device), table.to(device)

    def phases(self, device) -> torch.Tensor:
        """The start phases (1, 9) in cycles, the fundamental's 0."""
        device = torch.device(device)
        if device not in self._phases:
            self._make(_FIRST_ROWS, device)
        return self._phases[device]

    def sine_noise(self, rows: int, device) -> torch.Tensor:
        """The first `rows` rows of the sine-noise table, (1, rows, 9), uniform in [0, 1)."""
        device = torch.device(device)
        if rows > TABLE_ROWS:
            raise InputError(f"CosyVoice 3's causal HiFT has noise for {TABLE_ROWS} samples (300 s at 24 kHz), "
                             f"this call needs {rows}: vocode shorter pieces")
        table = self._tables.get(device)
        if table is None or table.shape[1] < rows:
            have = 0 if table is None else table.shape[1]
            self._make(min(TABLE_ROWS, max(rows, 2 * have, _FIRST_ROWS)), device)
        return self._tables[device][:, :rows]

    def release(self) -> None:
        """Drop the tables made so far (they are made again when needed)."""
        self._phases.clear()
        self._tables.clear()


class SineGen2Source(nn.Module):
    """Upstream's SourceModuleHnNSF with SineGen2: f0 per sample (B, L, 1) -> the excitation (B, 1, L)."""

    def __init__(self, config, causal: bool = False, noise: CausalNoise | None = None):
        super().__init__()
        self.harmonics = config.nb_harmonics + 1
        self.sampling_rate = config.sampling_rate
        self.scale = config.samples_per_frame
        self.sine_amp = config.nsf_alpha
        self.noise_std = config.nsf_sigma
        self.voiced_threshold = config.nsf_voiced_threshold
        self.causal = causal
        self.noise = noise
        self.l_linear = ops.Linear(self.harmonics, 1)

    @torch.no_grad()
    def sines(self, f0: torch.Tensor, generator: torch.Generator | None = None):
        """f0 (B, L, 1) Hz -> (sines with noise (B, L, H), voiced flags (B, L, 1)): upstream's SineGen2.forward."""
        device = f0.device
        multiples = torch.arange(1, self.harmonics + 1, dtype=torch.float32, device=device)[None, None, :]
        cycles = (f0 * multiples / self.sampling_rate) % 1  # cycles per sample, each harmonic (B, L, H)
        if self.causal:
            cycles[:, 0, :] = cycles[:, 0, :] + self.noise.phases(device)
        else:
            start = torch.rand(f0.shape[0], self.harmonics, generator=generator, device=device)
            start[:, 0] = 0
            cycles[:, 0, :] = cycles[:, 0, :] + start
        # integrated per frame (linear downsampling picks each frame's value), then spread back over its samples
        per_frame = F.interpolate(cycles.transpose(1, 2), scale_factor=1 / self.scale, mode="linear").transpose(1, 2)
        phase = torch.cumsum(per_frame, dim=1) * 2 * math.pi
        phase = F.interpolate(phase.transpose(1, 2) * self.scale, scale_factor=float(self.scale),
                              mode="nearest" if self.causal else "linear").transpose(1, 2)
        sines = torch.sin(phase) * self.sine_amp
        voiced = (f0 > self.voiced_threshold).to(torch.float32)
        noise_amp = voiced * self.noise_std + (1 - voiced) * self.sine_amp / 3
        if self.causal:
            noise = noise_amp * self.noise.sine_noise(sines.shape[1], device)
        else:  # randn_like: the draw fills the sines' own (transposed) layout
            noise = noise_amp * torch.empty_like(sines).normal_(generator=generator)
        return sines * voiced + noise, voiced

    def forward(self, f0: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """f0 per sample (B, L, 1) Hz, upstream's layout (a transposed upsampling) -> the excitation (B, 1, L)."""
        if self.causal:
            if generator is not None:
                raise InputError("CosyVoice 3's causal HiFT draws nothing at run time: leave the generator out")
            if self.noise is None:
                raise InputError("this causal HiFT has no noise tables (CausalNoise): load it with load_causal_hift")
        else:
            _check_generator(generator, f0.device)
        sines, voiced = self.sines(f0, generator)
        merged = torch.tanh(self.l_linear(sines.to(self.l_linear.weight.dtype)))  # (B, L, 1)
        if not self.causal:  # upstream's noise branch, unused by HiFT: drawn and dropped
            torch.empty_like(voiced).normal_(generator=generator)
        return merged.transpose(1, 2)
