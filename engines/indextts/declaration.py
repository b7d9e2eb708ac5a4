"""IndexTTS's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import Asset, EngineSpec, Param, Reference

LICENSE = ("bilibili Model Use License Agreement (https://github.com/index-tts/index-tts/blob/main/LICENSE: its "
           "\"Model\" is the weights and the final code; above 100 million monthly users or RMB 1 billion a year "
           "a separate licence is needed)")
# The eight emotions of an emotion vector, in upstream's order (infer_v2's emo_vector, QwenEmotion's answer)
EMOTIONS = ("happy", "angry", "sad", "afraid", "disgusted", "melancholic", "surprised", "calm")
# Where the emotion comes from (infer_v2.infer's keywords):
#   speaker: the speaker reference's own (emo_audio_prompt=None);
#   audio:   a second recording (emo_audio_prompt) mixed in by emo_alpha;
#   vector:  the eight sliders (emo_vector), scaled by emo_alpha;
#   text:    QwenEmotion reads emo_text (or the text itself) into a vector (use_emo_text=True).
EMOTION_MODES = ("speaker", "audio", "vector", "text")
RELEASE_FILES = ("config.yaml", "gpt.pth", "s2mel.pth", "bpe.model", "wav2vec2bert_stats.pt", "feat1.pt",
                 "feat2.pt", "qwen0.6bemo4-merge/*")

ENGINE = EngineSpec(
    id="indextts",
    display_name="IndexTTS",
    description="Zero-shot TTS with emotion control from a second recording, eight sliders or a description "
                "(IndexTTS 2, 22.05 kHz), exact to index-tts/index-tts.",
    implementation="engine",
    weights_license=LICENSE,
    license_acceptance=True,
    checkpoint_suffixes=(".yaml", ".pth"),  # or rather its folder (config.yaml beside gpt.pth, s2mel.pth, ...)
    repos=("IndexTeam/IndexTTS-2",),
    repo_files=RELEASE_FILES,
    # what ensure_models_available downloads into hf_cache/ beside the model (found there too)
    assets=(Asset("facebook/w2v-bert-2.0", ("config.json", "preprocessor_config.json", "model.safetensors")),
            Asset("amphion/MaskGCT", ("semantic_codec/model.safetensors",)),
            Asset("funasr/campplus", ("campplus_cn_common.bin",)),
            Asset("nvidia/bigvgan_v2_22khz_80band_256x", ("config.json", "bigvgan_generator.pt"))),
    load_options=(
        Option("emotion_model", bool, True, None, "load QwenEmotion (qwen0.6bemo4-merge/) for emotion=text"),
        Option("text_normaliser", str, "auto", ("auto", "wetext", "none"),
               "how numbers, dates and symbols are read: wetext (upstream's normaliser; pip install wetext), none "
               "(the text as written), auto (wetext when it is installed)"),
    ),
    # _load_and_cut_audio keeps the first 15 s of each reference
    reference=Reference(0.5, 600.0, extra=1, help="a recording of the voice to clone (its first 15 s are used, "
                                                   "as upstream uses them); a second one is the emotion reference"),
    # infer_v2.infer's defaults; the ranges are webui.py's. do_sample is always on (upstream's default: beam-search
    # multinomial sampling; webui's do_sample off, plain beam search, is not ported)
    speak_params=(
        Param("emotion", str, "speaker", "where the emotion comes from: speaker (the voice's own), audio (the "
              "second reference), vector (the sliders below), text (QwenEmotion reads emotion_text)",
              choices=EMOTION_MODES),
        Param("emo_alpha", float, 1.0, "emotion=audio or vector: how much of it (0: the speaker's own)",
              min=0.0, max=1.0, step=0.01),
        *(Param(name, float, 0.0, f"emotion=vector: {name}", min=0.0, max=1.2, step=0.05) for name in EMOTIONS),
        Param("emotion_text", str, "", "emotion=text: the description QwenEmotion reads (empty: the text itself)"),
        Param("use_random", bool, False, "emotion=vector or text: pick each emotion's example at random instead "
              "of the one closest to the voice"),
        Param("max_text_tokens_per_segment", int, 120, "long text is split into segments of at most this many "
              "tokens", min=20, max=600, step=2),
        Param("interval_silence", int, 200, "milliseconds of silence between segments", min=0, max=2000, step=10),
        Param("temperature", float, 0.8, "GPT sampling temperature", min=0.1, max=2.0, step=0.1),
        Param("top_p", float, 0.8, "GPT nucleus sampling", min=0.0, max=1.0, step=0.01),
        Param("top_k", int, 30, "GPT top-k sampling (0: off)", min=0, max=100, step=1),
        Param("num_beams", int, 3, "GPT beams", min=1, max=10, step=1),
        Param("repetition_penalty", float, 10.0, "GPT repetition penalty", min=0.1, max=20.0, step=0.1),
        Param("length_penalty", float, 0.0, "GPT beam length penalty", min=-2.0, max=2.0, step=0.1),
        Param("max_mel_tokens", int, 1500, "most GPT tokens per segment (too few cut the audio short)", min=50,
              max=1815, step=10),
    ),
)
