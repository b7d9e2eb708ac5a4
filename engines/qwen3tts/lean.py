"""The frame loop's steps on the CPU: the talker's and predictor's decoders as mizuoto.nn.qwen_lean's
LeanDecoder (the shared decoder's kernels in its order, without module and segment plumbing), and their
heads and embeddings as plain calls, on weights gathered once per request; the same bits as the module
path, which the parity tests run.

A frame is one talker step and G-1 code-predictor steps, each a forward of a few layers for one or two
positions.

One more saving is exact by construction: the predictor looks up the embedding of codebook 0 (its
prefill) and of codebooks 1..G-2 (its step inputs), which are G-1 of the G lookups the talker's next
input sums; they are kept, and only the last codebook is looked up again. (Lookups are copies.)

Attention still goes through each decoder's accel site; CUDA keeps runtime.graphs.DecoderSteps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mizuoto.nn import qwen_lean
from mizuoto.nn.qwen_lean import LeanDecoder, head, linear_parts, signed_sin
from mizuoto.runtime import sampling

from .talker import Talker


def usable(talker: Talker) -> bool:
    """The lean steps serve CPU models in inference (every weight on the CPU, autograd off)."""
    return talker.device.type == "cpu" and qwen_lean.usable(talker)


class LeanFrame:
    """One request's talker step and predictor draws on the CPU (built per request: the weights are
    read from the modules then, so a reload between requests is seen)."""

    def __init__(self, talker: Talker, drafter):
        dtype = talker.dtype
        self.drafter = drafter
        self.predictor_ropes = tuple((cos, signed_sin(sin)) for cos, sin in drafter.ropes)
        predictor = talker.code_predictor
        self.talker = LeanDecoder(talker.decoder, dtype)
        self.predictor = LeanDecoder(predictor.decoder, dtype)
        self.codec_head = linear_parts(talker.codec_head)
        self.code0_table = talker.codec_embedding.weight
        self.tables = tuple(t.weight for t in predictor.codec_embedding)
        self.heads = tuple(linear_parts(h) for h in predictor.lm_head)
        projection = predictor.small_to_mtp_projection
        self.projection = None if projection is None else linear_parts(projection)

    # -- the talker ---------------------------------------------------------------------------------

    def talker_step(self, embeddings: torch.Tensor, text: torch.Tensor, rope, attention):
        """Talker.frame_input + the decoder + Talker.logits: the frame's G code embeddings (B, G, hidden)
        and its text embedding (B, 1, hidden) -> (float32 scores (B, V), last state (B, 1, hidden))."""
        x = embeddings.sum(1, keepdim=True) + text
        cos, sin = rope
        h = self.talker(x, cos, signed_sin(sin), attention.cache, attention.mask)
        return self._talker_logits(h), h[:, -1:]

    def _talker_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Talker.logits: codec_head over every position, the last one's scores in float32."""
        return head(hidden, self.codec_head)

    # -- the code predictor -------------------------------------------------------------------------

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        if self.projection is None:
            return x
        b, n, width = x.shape
        return qwen_lean.mm(x.reshape(b * n, width), self.projection).view(b, n, -1)

    def _logits(self, j: int, hidden: torch.Tensor) -> torch.Tensor:
        """CodePredictor.logits: head j over every position, the last one's scores in float32."""
        return head(hidden, self.heads[j])

    def draw(self, past_hidden: torch.Tensor, code0: torch.Tensor, generator):
        """FrameDrafter.draw's codes and invalid flags, plus the frame's G code embeddings (B, G, hidden)
        for the talker's next input."""
        drafter = self.drafter
        cache, ropes, masks, sampler = drafter.cache, self.predictor_ropes, drafter.masks, drafter.sampler
        greedy = drafter.greedy
        cache.length = 0  # a fresh cache for this frame
        embedded = [F.embedding(code0, self.code0_table)]
        x = self._project(torch.cat((past_hidden, embedded[0]), dim=1))
        logits = self._logits(0, self.predictor(x, *ropes[0], cache, masks[0]))
        cache.advance(2)
        drawn, invalid = [], []
        steps = len(self.heads)
        for j in range(steps):
            if j:
                x = self._project(embedded[-1])
                logits = self._logits(j, self.predictor(x, *ropes[j], cache, masks[j]))
                cache.advance(1)
            if greedy:  # no processor applies: sample() would take the argmax of these scores
                ids = logits.argmax(dim=-1)
            else:
                ids, bad = sampling.sample(logits, sampler, j, generator)
                invalid.append(bad)
            drawn.append(ids)
            embedded.append(F.embedding(ids[:, None], self.tables[j]))
        codes = torch.stack(drawn, dim=1)
        if invalid:
            flags = torch.stack(invalid).any(dim=0)
        else:
            flags = torch.zeros(codes.shape[0], dtype=torch.bool, device=codes.device)
        return codes, flags, torch.cat(embedded, dim=1)
