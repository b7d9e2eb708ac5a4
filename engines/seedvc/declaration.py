"""Seed-VC's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import CONVERT, Asset, EngineSpec, Param, Reference

from .assets import CAMPPLUS_FILE, CAMPPLUS_REPO, DIT_CHECKPOINT, DIT_CONFIG

# How upstream computes (SeedVCWrapper.convert_voice): the Whisper content encoder in float16 and the
# diffusion under float16 autocast, on every device. "float32" runs both in float32: upstream has no switch for
# that (the wrapper always casts; inference.py's --fp16 false keeps Whisper in float16), so its reference is
# upstream's own code with those two casts taken out (scripts/parity/seedvc_references.py says how).
PRECISIONS = ("float16", "float32")

ENGINE = EngineSpec(
    id="seedvc",
    display_name="Seed-VC",
    description="Zero-shot voice conversion: the speech of one recording in the voice of another (Seed-VC v1, "
                "22.05 kHz), exact to seed-vc 0.4.3.",
    implementation="engine",
    # seed-vc 0.4.3 states no licence for its DiT weights (its code is GPL-3.0); the assets it loads are
    # openai/whisper-small (MIT), nvidia/bigvgan_v2 (MIT) and funasr/campplus (Apache-2.0 on its model card)
    weights_license="not stated by upstream (see the Plachta/Seed-VC model card; seed-vc's code is GPL-3.0); "
                    "Whisper MIT, BigVGAN MIT",
    checkpoint_suffixes=(".pth",),  # or rather its folder (the DiT .pth and its .yml, with the shared assets)
    kind=CONVERT,
    repos=("Plachta/Seed-VC",),
    # the v1 offline model's two files of that repo, and what upstream downloads beside them (engines/seedvc/
    # assets.py finds them in models/tts/seedvc/<owner>--<name>/)
    repo_files=(DIT_CHECKPOINT, DIT_CONFIG),
    assets=(Asset("openai/whisper-small", ("config.json", "model.safetensors")),
            Asset("nvidia/bigvgan_v2_22khz_80band_256x", ("config.json", "bigvgan_generator.pt")),
            Asset(CAMPPLUS_REPO, (CAMPPLUS_FILE,))),
    # upstream keeps the reference's first 25 s (convert_voice: ref_audio[:sr * 25]); a longer one is taken
    # and cut there, as upstream cuts it
    reference=Reference(0.5, 600.0, help="a recording of the voice to convert into (its first 25 s are used, "
                                         "as upstream uses them)"),
    load_options=(
        Option("precision", str, "float16", PRECISIONS,
               "float16: upstream's arithmetic (its Whisper encoder in float16, the diffusion under float16 "
               "autocast); float32: both in float32"),
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
