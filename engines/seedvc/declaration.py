"""Seed-VC's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import CONVERT, Asset, EngineSpec, Param, Reference, Variant

from .assets import (
    ASTRAL_NARROW,
    ASTRAL_REPO,
    ASTRAL_WIDE,
    CAMPPLUS_FILE,
    CAMPPLUS_REPO,
    DIT_CHECKPOINT,
    DIT_CONFIG,
    F0_CHECKPOINT,
    F0_CONFIG,
    HIFT_FILE,
    HIFT_REPO,
    HUBERT_REPO,
    REALTIME_CHECKPOINT,
    REALTIME_CONFIG,
    RMVPE_FILE,
    RMVPE_REPO,
    V2_AR,
    V2_CFM,
    V2_VOCODER_REPO,
)

REPO = "Plachta/Seed-VC"
WHISPER = Asset("openai/whisper-small", ("config.json", "model.safetensors"))
CAMPPLUS = Asset(CAMPPLUS_REPO, (CAMPPLUS_FILE,))

# How upstream computes (SeedVCWrapper.convert_voice): the Whisper content encoder in float16 and the
# diffusion under float16 autocast, on every device. "float32" runs both in float32: upstream has no switch for
# that (the wrapper always casts; inference.py's --fp16 false keeps Whisper in float16), so its reference is
# upstream's own code with those two casts taken out (scripts/parity/seedvc_references.py says how).
# The real-time model (api.inference) has the switch: "float16" is its fp16=True (the diffusion under float16
# autocast), "float32" its fp16=False; its XLS-R runs in float16 in both, as upstream's `.half()` does.
PRECISIONS = ("float16", "float32")

ENGINE = EngineSpec(
    id="seedvc",
    display_name="Seed-VC",
    description="Zero-shot voice conversion: the speech (or singing) of one recording in the voice of another "
                "(Seed-VC v1: the offline and real-time models at 22.05 kHz, the singing model at 44.1 kHz with "
                "F0; v2's timbre and style conversion and anonymization), exact to seed-vc 0.4.3.",
    implementation="engine",
    # seed-vc 0.4.3 states no licence for its DiT weights (its code is GPL-3.0); the assets it loads are
    # openai/whisper-small (MIT), nvidia/bigvgan_v2 (MIT) and funasr/campplus (Apache-2.0 on its model card);
    # the real-time model's facebook/wav2vec2-xls-r-300m (Apache-2.0) and FunAudioLLM/CosyVoice-300M's hift.pt
    # (Apache-2.0 on its model card)
    weights_license="not stated by upstream (see the Plachta/Seed-VC model card; seed-vc's code is GPL-3.0); "
                    "Whisper MIT, BigVGAN MIT; real-time: XLS-R Apache-2.0, CosyVoice-300M's HiFT Apache-2.0; "
                    "singing: RMVPE (lj1995/VoiceConversionWebUI) MIT; v2: HuBERT-large (facebook) Apache-2.0, "
                    "ASTRAL-quantization not stated by upstream",
    checkpoint_suffixes=(".pth",),  # or rather its folder (the DiT .pth and its .yml, with the shared assets)
    kind=CONVERT,
    repos=(REPO,),
    # each model is two files of that repo plus what upstream downloads beside it (engines/seedvc/assets.py
    # finds those in models/tts/seedvc/<owner>--<name>/): hf:Plachta/Seed-VC is the v1 offline model, its
    # variants the real-time and the singing ones (the same folder, each download its own files)
    repo_files=(DIT_CHECKPOINT, DIT_CONFIG),
    assets=(WHISPER, Asset("nvidia/bigvgan_v2_22khz_80band_256x", ("config.json", "bigvgan_generator.pt")), CAMPPLUS),
    variants=(
        Variant("realtime", REPO, (REALTIME_CHECKPOINT, REALTIME_CONFIG), REALTIME_CHECKPOINT,
                (Asset("facebook/wav2vec2-xls-r-300m",
                       ("config.json", "preprocessor_config.json", "pytorch_model.bin")),
                 Asset(HIFT_REPO, (HIFT_FILE,)), CAMPPLUS),
                "v1 real-time: XLS-R content, HiFT, 22.05 kHz"),
        Variant("singing", REPO, (F0_CHECKPOINT, F0_CONFIG), F0_CHECKPOINT,
                (WHISPER, Asset("nvidia/bigvgan_v2_44khz_128band_512x", ("config.json", "bigvgan_generator.pt")),
                 CAMPPLUS, Asset(RMVPE_REPO, (RMVPE_FILE,))),
                "v1 singing: 44.1 kHz, F0 from RMVPE"),
        Variant("v2", REPO, (V2_CFM, V2_AR), V2_CFM,
                (Asset(ASTRAL_REPO, (ASTRAL_NARROW, ASTRAL_WIDE)),
                 Asset(HUBERT_REPO, ("config.json", "preprocessor_config.json", "pytorch_model.bin")),
                 Asset(V2_VOCODER_REPO, ("config.json", "bigvgan_generator.pt")), CAMPPLUS),
                "v2: HuBERT + ASTRAL content, the v2 CFM DiT, 22.05 kHz; convert_style adds its AR style "
                "converter (accent, pace, emotion)"),
    ),
    # upstream keeps the reference's first 25 s (convert_voice: ref_audio[:sr * 25]); a longer one is taken
    # and cut there, as upstream cuts it
    reference=Reference(0.5, 600.0, help="a recording of the voice to convert into (its first 25 s are used, "
                                         "as upstream uses them)"),
    load_options=(
        Option("precision", str, "float16", PRECISIONS,
               "float16: upstream's arithmetic (its Whisper encoder in float16, the diffusion under float16 "
               "autocast); float32: both in float32 (the real-time model: its fp16 switch; XLS-R stays float16 "
               "as upstream runs it)"),
    ),
    # upstream's SeedVCWrapper.convert_voice defaults (its library entry point); v2's are those of
    # VoiceConversionWrapper.convert_voice_with_streaming_arrays, except its 30 diffusion steps
    speak_params=(
        Param("diffusion_steps", int, 10, "diffusion steps (upstream suggests 4 to 10 for speed, 30 to 50 for "
              "quality; v2's own default is 30)", min=1, max=200, step=1),
        Param("length_adjust", float, 1.0, "v1, and v2 with convert_style: output length relative to the source "
              "(below 1: faster speech)", min=0.25, max=4.0, step=0.05),
        Param("inference_cfg_rate", float, 0.7, "v1: classifier-free guidance of the diffusion (0 turns it off)",
              min=0.0, max=5.0, step=0.05),
        # v2 (upstream's convert_voice_with_streaming_arrays keywords and defaults)
        Param("intelligibility_cfg_rate", float, 0.7, "v2: guidance towards the source's content", min=0.0, max=5.0,
              step=0.05),
        Param("similarity_cfg_rate", float, 0.7, "v2: guidance towards the reference voice", min=0.0, max=5.0,
              step=0.05),
        Param("convert_style", bool, False, "v2: convert the speaking style too (accent, pace, emotion: the AR "
              "style converter rewrites the content in the reference's manner); off: the voice's timbre only"),
        Param("anonymization_only", bool, False, "v2: a random voice instead of the reference's (with "
              "convert_style, the style converter does not hear the reference either)"),
        Param("top_p", float, 0.9, "v2 style converter: nucleus sampling (1: the whole distribution)", min=0.01,
              max=1.0, step=0.01),
        Param("temperature", float, 1.0, "v2 style converter: sampling temperature", min=0.01, max=5.0, step=0.05),
        Param("repetition_penalty", float, 1.0, "v2 style converter: repetition penalty (upstream's applies to the "
              "first generated token only)", min=0.1, max=5.0, step=0.05),
        # the singing model's F0 (upstream's convert_voice(f0_condition=True) arguments and defaults)
        Param("auto_f0_adjust", bool, True, "singing model: move the source's pitch to the reference voice's "
              "register (its median)"),
        Param("pitch_shift", int, 0, "singing model: shift the pitch by this many semitones", min=-24, max=24,
              step=1),
    ),
)
