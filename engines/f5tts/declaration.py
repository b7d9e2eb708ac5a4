"""F5-TTS's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import EngineSpec, Param, Reference

ENGINE = EngineSpec(
    id="f5tts",
    display_name="F5-TTS",
    description="Voice cloning by flow matching (F5-TTS with the Vocos vocoder), exact to f5-tts 1.1.22.",
    implementation="engine",
    weights_license="CC-BY-NC-4.0",
    license_acceptance=True,
    checkpoint_suffixes=(".safetensors", ".pt"),  # or a folder holding one, with its config and vocoder
    # No download choice: SWivid/F5-TTS holds every model in both formats (many GB) and no vocoder;
    # the README says which two folders to fetch.
    load_options=(
        Option("architecture", str, "auto", ("auto", "F5TTS_v1_Base", "F5TTS_Base", "E2TTS_Base"),
               "which released model the weights are (auto: from a config file or the name, else v1)"),
        Option("vocoder", str, "", None, "folder of the Vocos mel-24khz vocoder (config.yaml + pytorch_model.bin); "
               "empty: vocos/ beside the checkpoint"),
    ),
    # upstream's preprocessing (trim_reference) clips references to about 12 s
    reference=Reference(0.5, 30.0, transcript=True, channels=True, help="a recording of the voice to clone"),
    # upstream's infer_process defaults
    speak_params=(
        Param("speed", float, 1.0, "speaking rate: 2.0 is twice as fast", min=0.3, max=3.0, step=0.05),
        Param("nfe_step", int, 32, "flow-matching steps (16 and below use EPSS grids)", min=1, max=128, step=1),
        Param("cfg_strength", float, 2.0, "classifier-free guidance strength", min=0.0, max=10.0, step=0.1),
        Param("sway_sampling_coef", float, -1.0, "sway sampling of the time steps (0: uniform)", min=-1.0,
              max=1.0, step=0.1),
        Param("fix_duration", float, 0.0, "fixed length in seconds, reference included (0: estimated from the "
              "text)", min=0.0, max=300.0, step=0.1),
        Param("trim_reference", bool, True, "clip the reference to about 12 s at a silence and trim its silent "
              "edges, as upstream's preprocessing does"),
        Param("cross_fade_duration", float, 0.15, "seconds of cross-fade between chunks of long text", min=0.0,
              max=1.0, step=0.01),
    ),
)
