"""Seed-VC's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import CONVERT, Asset, EngineSpec, Param, Reference

from .assets import (
    CAMPPLUS_FILE,
    CAMPPLUS_REPO,
    DIT_CHECKPOINT,
    DIT_CONFIG,
    HIFT_FILE,
    HIFT_REPO,
    REALTIME_CHECKPOINT,
    REALTIME_CONFIG,
)

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
    description="Zero-shot voice conversion: the speech of one recording in the voice of another (Seed-VC v1, "
                "22.05 kHz: the offline model or the real-time one), exact to seed-vc 0.4.3.",
    implementation="engine",
    # seed-vc 0.4.3 states no licence for its DiT weights (its code is GPL-3.0); the assets it loads are
    # openai/whisper-small (MIT), nvidia/bigvgan_v2 (MIT) and funasr/campplus (Apache-2.0 on its model card);
    # the real-time model's facebook/wav2vec2-xls-r-300m (Apache-2.0) and FunAudioLLM/CosyVoice-300M's hift.pt
    # (Apache-2.0 on its model card)
    weights_license="not stated by upstream (see the Plachta/Seed-VC model card; seed-vc's code is GPL-3.0); "
                    "Whisper MIT, BigVGAN MIT; real-time: XLS-R Apache-2.0, CosyVoice-300M's HiFT Apache-2.0",
    checkpoint_suffixes=(".pth",),  # or rather its folder (the DiT .pth and its .yml, with the shared assets)
    kind=CONVERT,
    repos=("Plachta/Seed-VC",),
    # the v1 offline and real-time models' two files each of that repo, and what upstream downloads beside them
    # (engines/seedvc/assets.py finds them in models/tts/seedvc/<owner>--<name>/); the downloaded folder loads
    # the offline model, its DiT_uvit_tat_xlsr_ema.pth the real-time one
    repo_files=(DIT_CHECKPOINT, DIT_CONFIG, REALTIME_CHECKPOINT, REALTIME_CONFIG),
    assets=(Asset("openai/whisper-small", ("config.json", "model.safetensors")),
            Asset("nvidia/bigvgan_v2_22khz_80band_256x", ("config.json", "bigvgan_generator.pt")),
            Asset(CAMPPLUS_REPO, (CAMPPLUS_FILE,)),
            Asset("facebook/wav2vec2-xls-r-300m", ("config.json", "preprocessor_config.json", "pytorch_model.bin")),
            Asset(HIFT_REPO, (HIFT_FILE,))),
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
    # upstream's SeedVCWrapper.convert_voice defaults (its library entry point)
    speak_params=(
        Param("diffusion_steps", int, 10, "diffusion steps (upstream suggests 4 to 10 for speed, 30 to 50 for "
              "quality)", min=1, max=200, step=1),
        Param("length_adjust", float, 1.0, "output length relative to the source (below 1: faster speech)",
              min=0.25, max=4.0, step=0.05),
        Param("inference_cfg_rate", float, 0.7, "classifier-free guidance of the diffusion (0 turns it off)",
              min=0.0, max=5.0, step=0.05),
    ),
)
