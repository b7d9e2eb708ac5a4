"""Qwen3-TTS's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import EngineSpec, Param, Reference

# The wrapper's text modes: the whole text in the prefill ("non-streaming", the default of
# generate_custom_voice and generate_voice_design) or one text token per frame (the default of
# generate_voice_clone). "auto" takes the default of the model's kind.
TEXT_MODES = ("auto", "on", "off")

# The preset speakers of the released CustomVoice models (Qwen3-TTS-12Hz-0.6B/1.7B-CustomVoice), spelled as
# their model cards spell them; config.json's talker_config.spk_id holds them in lower case, and upstream
# matches names without regard to case. "" is no speaker (VoiceDesign and Base). A fine-tuned model's own
# speakers go in custom_speaker.
SPEAKERS = ("", "Vivian", "Serena", "Uncle_Fu", "Dylan", "Eric", "Ryan", "Aiden", "Ono_Anna", "Sohee")

ENGINE = EngineSpec(
    id="qwen3tts",
    display_name="Qwen3-TTS",
    description="Preset voices (CustomVoice), voices from a description (VoiceDesign) and voice cloning (Base), "
                "exact to qwen-tts 0.1.1.",
    implementation="engine",
    weights_license="Apache-2.0",
    checkpoint_suffixes=(".safetensors",),  # or rather its Hugging Face folder (config.json, speech_tokenizer/)
    repos=("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
           "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign", "Qwen/Qwen3-TTS-12Hz-1.7B-Base", "Qwen/Qwen3-TTS-12Hz-0.6B-Base"),
    load_options=(
        Option("fused_projections", bool, False, None, "stack each layer's q/k/v and gate/up projections of the "
               "talker and the code predictor into one matmul each (faster; not bit-identical on CUDA)"),
    ),
    # upstream sets no limits; the speaker encoder needs a few mel frames
    reference=Reference(0.1, 60.0, transcript=True, transcript_unused_with="x_vector_only",
                        help="Base models: a recording of the voice to clone (any rate; resampled as upstream does)"),
    # upstream's wrapper defaults (generate_custom_voice / generate_voice_design / generate_voice_clone and
    # the released generation_config.json); they are passed explicitly, as a caller of the wrapper would
    speak_params=(
        Param("speaker", str, "", "CustomVoice models: the preset speaker; empty for VoiceDesign and Base",
              choices=SPEAKERS),
        Param("custom_speaker", str, "", "a fine-tuned CustomVoice model's own speaker, typed (any case); when "
              "set it is used instead of speaker"),
        Param("language", str, "Auto", "language of the text (Auto: left to the model), e.g. English, Chinese"),
        Param("instruct", str, "", "how to speak: the voice description (VoiceDesign) or a style instruction "
              "(CustomVoice 1.7B; the 0.6B models ignore it, as upstream)"),
        Param("non_streaming_mode", str, "auto", "on: the whole text in the prompt; off: one text token per frame; "
              "auto: on for CustomVoice and VoiceDesign, off for Base (upstream's defaults)", choices=TEXT_MODES),
        Param("x_vector_only", bool, False, "Base models: clone from the speaker embedding alone, without the "
              "reference's transcript and codes"),
        Param("do_sample", bool, True, "sample codebook 0 (off: greedy)"),
        Param("temperature", float, 0.9, "sampling temperature of codebook 0", min=0.01, max=5.0, step=0.05),
        Param("top_k", int, 50, "keep the k most likely codes (0: all)", min=0, max=4096, step=1),
        Param("top_p", float, 1.0, "keep the most likely codes up to this probability mass", min=0.01, max=1.0,
              step=0.01),
        Param("repetition_penalty", float, 1.05, "discourage repeating codes (1: off)", min=1.0, max=3.0, step=0.01),
        Param("subtalker_dosample", bool, True, "sample codebooks 1..15 (off: greedy)"),
        Param("subtalker_temperature", float, 0.9, "sampling temperature of codebooks 1..15", min=0.01, max=5.0,
              step=0.05),
        Param("subtalker_top_k", int, 50, "top-k of codebooks 1..15 (0: all)", min=0, max=4096, step=1),
        Param("subtalker_top_p", float, 1.0, "top-p of codebooks 1..15", min=0.01, max=1.0, step=0.01),
        Param("max_new_tokens", int, 0, "most codec frames to draw, 12.5 per second (0: the model's "
              "generation_config.json, 8192 for the released models)", min=0, max=65536, step=1),
    ),
)
