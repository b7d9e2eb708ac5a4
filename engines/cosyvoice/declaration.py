"""CosyVoice's declaration (no torch import)."""

from mizuoto.engines.spec import EngineSpec, Option, Param, Reference

# What the reference (or a saved speaker) is used for, as upstream's CosyVoice2 / CosyVoice3 methods use it:
#   zero_shot:     inference_zero_shot: the recording and its transcript lead the speech (the voice is continued);
#   cross_lingual: inference_cross_lingual: the voice only (its words unread), e.g. to speak another language;
#   instruct:      inference_instruct2: the voice, and `instruct_text` tells the LM how to speak.
# A saved speaker of spk2info.pt replaces the recording (upstream's zero_shot_spk_id); a trained speaker (an embedding
# only) is inference_sft.
MODES = ("zero_shot", "cross_lingual", "instruct")
SYSTEM_PROMPT = "You are a helpful assistant."  # CosyVoice 3's examples lead every prompt with it

# The files a download fetches: the model without the optional TensorRT / vLLM / JIT exports, and only the Qwen
# sizes and tokenizer of CosyVoice-BlankEN (its 1 GB model.safetensors is overwritten by llm.pt upstream too).
RELEASE_FILES = ("cosyvoice2.yaml", "cosyvoice3.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx",
                 "speech_tokenizer_v2.onnx", "speech_tokenizer_v3.onnx", "spk2info.pt", "CosyVoice-BlankEN/*.json",
                 "CosyVoice-BlankEN/*.txt")

ENGINE = EngineSpec(
    id="cosyvoice",
    display_name="CosyVoice",
    description="Multilingual zero-shot TTS with instructions and fine-grained tags: CosyVoice 2 and CosyVoice 3 "
                "(24 kHz), exact to FunAudioLLM/CosyVoice.",
    implementation="engine",
    weights_license="Apache-2.0 (upstream's code; the released weights state no other licence)",
    checkpoint_suffixes=(".yaml", ".pt"),  # or rather its folder (cosyvoice2.yaml / cosyvoice3.yaml beside the rest)
    repos=("FunAudioLLM/Fun-CosyVoice3-0.5B-2512", "FunAudioLLM/CosyVoice2-0.5B"),
    repo_files=RELEASE_FILES,
    load_options=(
        Option("fused_projections", bool, False, None, "stack each LM layer's q/k/v and gate/up projections into "
               "one matmul each (faster; not bit-identical on CUDA)"),
    ),
    # load_wav refuses rates below 16 kHz; the speech tokenizer takes at most 30 s
    reference=Reference(0.1, 30.0, transcript=True, transcript_unused_with="mode=cross_lingual|instruct",
                        help="a recording of the voice to clone (16 kHz or more, up to 30 s)"),
    speak_params=(
        Param("mode", str, "zero_shot", "zero_shot: the reference and its transcript lead the speech; cross_lingual: "
              "its voice only (another language, fine-grained tags); instruct: its voice, spoken as instruct_text "
              "says", choices=MODES),
        Param("instruct_text", str, "", "instruct mode: how to speak, e.g. 'Speak in Cantonese.' or "
              "'用四川话说这句话' (<|endofprompt|> is added when missing)"),
        Param("speaker", str, "", "a saved speaker of the model's spk2info.pt instead of the reference recording "
              "(empty: use the recording)"),
        Param("speed", float, 1.0, "speaking rate (the mel is stretched, as upstream's speed)", min=0.5, max=2.0,
              step=0.05),
        Param("text_frontend", bool, True, "normalise and split the text as upstream (off: speak it exactly as "
              "written, in one piece)"),
        Param("system_prompt", str, SYSTEM_PROMPT, "CosyVoice 3: what leads the prompt before <|endofprompt|> when "
              "the text, transcript or instruction has none"),
    ),
)
