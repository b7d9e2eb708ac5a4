"""Whisper's declaration (no torch import)."""

from mizuoto.engines.spec import TRANSCRIBE, EngineSpec, Param

from .languages import LANGUAGES

ENGINE = EngineSpec(
    id="whisper",
    display_name="Whisper",
    description="Speech recognition and translation, exact to openai-whisper; transcribes reference voices.",
    implementation="engine",
    weights_license="MIT",
    kind=TRANSCRIBE,
    checkpoint_suffixes=(".pt",),  # or a Hugging Face folder (config.json + safetensors)
    repos=("openai/whisper-large-v3-turbo", "openai/whisper-small", "openai/whisper-base", "openai/whisper-tiny"),
    # openai-whisper's command-line options, names and defaults
    speak_params=(
        Param("language", str, "auto", "spoken language, or auto to detect it", choices=("auto", *LANGUAGES)),
        Param("task", str, "transcribe", "transcribe, or translate into English", choices=("transcribe", "translate")),
        Param("temperature", float, 0.0, "sampling temperature (0: greedy or beam search)", min=0.0, max=1.0,
              step=0.1),
        Param("temperature_increment_on_fallback", float, 0.2, "temperature step when decoding fails the "
              "thresholds (0: no fallback)", min=0.0, max=1.0, step=0.1),
        Param("best_of", int, 5, "candidates when sampling at a temperature above 0", min=0, max=20),
        Param("beam_size", int, 5, "beams at temperature 0 (0: greedy)", min=0, max=20),
        Param("patience", float, 0.0, "beam search patience (0: default 1.0)", min=0.0, max=10.0, step=0.1),
        Param("length_penalty", float, 0.0, "beam length penalty alpha (0: simple length normalisation)",
              min=0.0, max=2.0, step=0.05),
        Param("initial_prompt", str, "", "text that conditions the first window (names, spelling)"),
        Param("condition_on_previous_text", bool, True, "feed each window's text to the next"),
        Param("compression_ratio_threshold", float, 2.4, "retry hotter when the text is this repetitive",
              min=0.0, max=10.0, step=0.1),
        Param("logprob_threshold", float, -1.0, "retry hotter below this average log probability", min=-10.0,
              max=0.0, step=0.1),
        Param("no_speech_threshold", float, 0.6, "treat a window as silent above this no-speech probability",
              min=0.0, max=1.0, step=0.05),
        Param("word_timestamps", bool, False, "word-level timestamps from cross-attention"),
        # appended after the first fourteen, so that saved workflows keep their widget values in place
        Param("clip_timestamps", str, "0", "comma-separated start,end,... seconds of the parts to transcribe "
              "(a missing last end is the end of the audio)"),
        Param("hallucination_silence_threshold", float, 0.0, "with word timestamps, skip silences longer than "
              "this many seconds around likely hallucinations (0: off)", min=0.0, max=30.0, step=0.5),
        Param("carry_initial_prompt", bool, False, "prompt every window with the initial prompt, not only the "
              "first"),
        Param("without_timestamps", bool, False, "decode text only, without timestamp tokens"),
    ),
)
