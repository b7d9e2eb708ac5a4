"""QwenLM: a causal language model over QwenDecoder (transformers' Qwen*ForCausalLM), with a prefill
and a one-token step that never waits on the device.

Prompts are left-padded as transformers' generate() pads them: positions count real tokens only,
and padding keys are masked for every later step.
"""

from __future__ import annotations

import torch
from torch import nn

from .ops import Linear
from .qwen import QwenConfig, QwenDecoder


class QwenLM(nn.Module):
    def __init__(self, config: QwenConfig):
        super().__init__()
        self.model = QwenDecoder(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)

    @classmethod
    def from_transformers(cls, hf_model) -> "QwenLM":
        lm = cls(QwenConfig.from_transformers(hf_model.config))
        lm.load_state_dict(hf_model.state_dict())
        return lm.to(hf_model.device, hf_model.dtype)

    def start(self, ids: torch.Tensor, attention: torch.Tensor, max_new_tokens: int, padded: bool | None = None):
        """Prefill `ids` (B, L) with `attention` (B, L) (1 = real token) -> the last position's logits.

        Prepares the cache and the running key mask for up to `max_new_tokens` steps. `padded` says
        whether any prompt is padded, when the caller knows (else it is read from the device once).
        """
        batch, length = ids.shape
        decoder = self.model
        capacity = length + max_new_tokens
        self.cache = decoder.new_cache(batch, capacity)
        self.keys = torch.ones(batch, capacity, dtype=torch.bool, device=ids.device)
        self.keys[:, :length] = attention.bool()
        self.padded = bool((attention == 0).any()) if padded is None else padded
        positions = (attention.long().cumsum(-1) - 1).masked_fill(attention == 0, 1)
        self.last_position = positions[:, -1:]
        mask = decoder.mask_for(self.keys[:, :length], length, length, padded=self.padded)
        hidden = decoder(decoder.embed_tokens(ids), positions, self.cache, mask)
        return self.lm_head(hidden[:, -1])

    def step(self, ids: torch.Tensor, step: int) -> torch.Tensor:
        """The logits after feeding `ids` (B, 1), the token drawn at `step` (0-based)."""
        decoder = self.model
        kv_len = self.cache.length + 1
        mask = decoder.mask_for(self.keys[:, :kv_len], 1, kv_len, padded=self.padded)
        hidden = decoder(decoder.embed_tokens(ids), self.last_position + (step + 1), self.cache, mask)
        return self.lm_head(hidden[:, -1])
