"""The Mimi encoder's split residual vector quantizer (transformers 4.57.3 `MimiSplitResidualVectorQuantizer`),
encode side only: 12.5 Hz latents -> one code per quantizer and frame.

Two residual stacks read the same latents: the semantic one (its first `num_semantic_quantizers`
codes) and the acoustic one (the rest). Each projects the latents with its own 1x1 conv
(`input_proj`, when the quantizer width differs from the model width), then each of its quantizers in
turn picks the nearest codebook entry of the residual (Euclidean, `torch.cdist` in float32 exactly as
transformers calls it, first index on ties) and subtracts that entry. A codebook entry is
`embed_sum / max(cluster_usage, 1e-5)`, in the model's dtype.

Only the quantizers whose codes qwen-tts keeps (`encoder_valid_num_quantizers`) run: each one reads
only the residual the earlier ones leave, so skipping the later ones changes no code. Names are
transformers' (`semantic_residual_vector_quantizer.layers.N.codebook.embed_sum`, ...); the decode-side
`output_proj` weights are loaded and unused, as the `initialized` flags are.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .mimi_config import MimiEncoderConfig

CODEBOOK_EPS = 1e-5


class EuclideanCodebook(nn.Module):
    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(config.codebook_size))
        self.register_buffer("embed_sum", torch.zeros(config.codebook_size, config.codebook_dim))

    @property
    def embed(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=CODEBOOK_EPS)[:, None]

    def nearest(self, residual: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
        """(B, D, T) -> (B, T) indices of the nearest entries."""
        x = residual.permute(0, 2, 1)
        flat = x.reshape((-1, x.shape[-1]))
        distances = torch.cdist(flat[None].float(), embed[None].float(), p=2)[0]
        return distances.argmin(dim=-1).view(*x.shape[:-1])


class VectorQuantization(nn.Module):
    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        self.codebook = EuclideanCodebook(config)


class ResidualVectorQuantizer(nn.Module):
    def __init__(self, config: MimiEncoderConfig, num_quantizers: int):
        super().__init__()
        self.layers = nn.ModuleList(VectorQuantization(config) for _ in range(num_quantizers))
        self.input_proj = self.output_proj = None
        if config.vector_quantization_hidden_dimension != config.hidden_size:
            width = config.vector_quantization_hidden_dimension
            self.input_proj = nn.Conv1d(config.hidden_size, width, 1, bias=False)
            self.output_proj = nn.Conv1d(width, config.hidden_size, 1, bias=False)

    def encode(self, latents: torch.Tensor, count: int) -> list[torch.Tensor]:
        """(B, hidden, T) -> `count` code tensors (B, T), one per quantizer in order."""
        residual = latents if self.input_proj is None else self.input_proj(latents)
        codes = []
        for layer in self.layers[:count]:
            embed = layer.codebook.embed
            indices = layer.codebook.nearest(residual, embed)
            residual = residual - F.embedding(indices, embed).permute(0, 2, 1)
            codes.append(indices)
        return codes


class SplitResidualVectorQuantizer(nn.Module):
    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        self.num_semantic_quantizers = config.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = ResidualVectorQuantizer(config, config.num_semantic_quantizers)
        self.acoustic_residual_vector_quantizer = ResidualVectorQuantizer(
            config, config.num_quantizers - config.num_semantic_quantizers)

    def encode(self, latents: torch.Tensor, count: int) -> torch.Tensor:
        """(B, hidden, T) latents -> (count, B, T) int64 codes, the semantic ones first."""
        semantic = self.semantic_residual_vector_quantizer.encode(latents, self.num_semantic_quantizers)
        acoustic = []
        if count > self.num_semantic_quantizers:
            acoustic = self.acoustic_residual_vector_quantizer.encode(latents, count - self.num_semantic_quantizers)
        return torch.stack(semantic + acoustic)
