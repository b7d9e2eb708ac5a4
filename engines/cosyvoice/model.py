"""One CosyVoice voice: the LM, the flow and the vocoder composed as upstream's CosyVoice2Model / CosyVoice3Model
(cosyvoice/cli/model.py) compose them for a request that is not streamed (`tts(stream=False)`):

    tokens = the LM's speech tokens (CosyVoice 3: silent tokens past five in a row dropped, llm_job's rule)
    mel = flow.inference(tokens, the flow prompt's tokens and mel, the speaker embedding)   (streaming off, final)
    speed != 1: the mel linearly interpolated to int(frames / speed) frames
    wave = HiFT(mel): CosyVoice 2's draws its noise from the request's generator after the LM's draws (upstream
           joins the LM thread first); CosyVoice 3's causal HiFT draws nothing
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

from .flow import Flow, SolveGraphs
from .llm import CosyVoiceLM, keep_silences
from .ras import RELEASED, RasParams


class CosyVoiceModel:
    def __init__(self, lm: CosyVoiceLM, flow: Flow, hift: torch.nn.Module):
        if lm.config.version != flow.config.version:
            raise InputError(f"a CosyVoice {lm.config.version} LM cannot drive a CosyVoice {flow.config.version} "
                             "flow: load the llm.pt and flow.pt of one release")
        self.version = lm.config.version
        self.lm, self.flow, self.hift = lm, flow, hift

    def speech_tokens(self, text, prompt_text, llm_prompt_speech_token, *, generator=None,
                      before_step: Callable[[], None] | None = None, params: RasParams = RELEASED,
                      steps=None) -> list[int]:
        """The LM's speech tokens; `steps`: the LM's DecoderSteps (CosyVoiceLM.steps), else its eager forward."""
        tokens = self.lm.generate(text, prompt_text, llm_prompt_speech_token, generator=generator,
                                  before_step=before_step, params=params, steps=steps)
        return list(keep_silences(tokens, self.version))

    @torch.inference_mode()
    def token2wav(self, tokens: list[int], prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                  embedding: torch.Tensor, speed: float = 1.0, *, generator=None,
                  before_step: Callable[[], None] | None = None, solve: SolveGraphs | None = None,
                  decode=None) -> torch.Tensor:
        """The final token2wav of a request: -> (1, samples). `solve`: the flow's SolveGraphs (CUDA graphs of its
        solver), else its eager solver; `decode`: HiFT's compiled decode (hift.compile_decode), else eager."""
        if speed <= 0:
            raise InputError(f"speed must be above 0, got {speed}")
        device = prompt_feat.device
        token = torch.tensor(tokens, device=device).unsqueeze(dim=0).to(torch.int32)
        mel = self.flow.inference(token, torch.tensor([token.shape[1]], dtype=torch.int32, device=device),
                                  prompt_token.to(torch.int32),
                                  torch.tensor([prompt_token.shape[1]], dtype=torch.int32, device=device),
                                  prompt_feat, embedding, streaming=False, finalize=True, before_step=before_step,
                                  solve=solve, generator=generator)
        if speed != 1.0:
            mel = F.interpolate(mel, size=int(mel.shape[2] / speed), mode="linear")
        if self.version == 2:
            wave, _ = self.hift.inference(mel, generator, cache_source=torch.zeros(1, 1, 0, device=device),
                                          decode=decode)
        else:
            wave, _ = self.hift.inference(mel, finalize=True, decode=decode)
        return wave

    def tts(self, text, prompt_text, llm_prompt_speech_token, flow_prompt_speech_token, prompt_speech_feat,
            flow_embedding, speed: float = 1.0, *, generator=None,
            before_step: Callable[[], None] | None = None) -> torch.Tensor:
        """upstream's tts(stream=False): text ids (1, N), prompt text ids (1, P), the LM's and the flow's prompt
        speech tokens (1, S), the prompt's mel (1, 2S, 80) and speaker embedding (1, 192) -> (1, samples)."""
        tokens = self.speech_tokens(text, prompt_text, llm_prompt_speech_token, generator=generator,
                                    before_step=before_step)
        return self.token2wav(tokens, flow_prompt_speech_token, prompt_speech_feat, flow_embedding, speed,
                              generator=generator, before_step=before_step)
