"""VoxCPM's declaration (no torch import)."""

from mizuoto.engines.spec import EngineSpec, Param, Reference

# How the one reference recording is used (upstream's VoxCPM.generate takes two audio inputs):
#   continuation: prompt_wav_path + prompt_text: the output continues the recording's speech (v1 and v2);
#   reference:    reference_wav_path: the voice alone, its words unread (VoxCPM2 only);
#   both:         the same recording as both (VoxCPM2 only).
CLONE_MODES = ("continuation", "reference", "both")

ENGINE = EngineSpec(
    id="voxcpm",
    display_name="VoxCPM",
    description="Tokenizer-free TTS with voice cloning: VoxCPM 0.5B, 1.5 and 2 (48 kHz), exact to voxcpm 2.0.3.",
    implementation="engine",
    weights_license="Apache-2.0",
    checkpoint_suffixes=(".safetensors", ".bin"),  # or rather its folder (config.json, audiovae.*, tokenizer.json)
    repos=("openbmb/VoxCPM2", "openbmb/VoxCPM1.5", "openbmb/VoxCPM-0.5B"),
    reference=Reference(0.05, 60.0, transcript=True, transcript_unused_with="clone_mode=reference",
                        help="a recording of the voice to clone (any rate; resampled as upstream does)"),
    # upstream's VoxCPM.generate defaults (core.py), passed explicitly as a caller would
    speak_params=(
        Param("cfg_value", float, 2.0, "classifier-free guidance of the local diffusion (upstream suggests 1 to 3)",
              min=0.0, max=10.0, step=0.1),
        Param("inference_timesteps", int, 10, "diffusion steps per patch (more: slower, upstream suggests 4 to 30)",
              min=1, max=100, step=1),
        Param("clone_mode", str, "continuation", "how the reference is used: continuation (its transcript first, "
              "the speech goes on from it), reference (the voice only, no transcript; VoxCPM2), both (VoxCPM2)",
              choices=CLONE_MODES),
        Param("control", str, "", "VoxCPM2: a description of the voice or style, e.g. 'warm female voice' (upstream's "
              "--control: the text becomes '(control)text'); not with a continuation"),
        Param("max_len", int, 4096, "most patches to generate (also limited to 6 per text token + 10)", min=1,
              max=8192, step=1),
        Param("min_len", int, 2, "patches generated before the stop head may end the speech", min=0, max=8192,
              step=1),
        Param("retry_badcase", bool, True, "generate again (up to retry_badcase_max_times) when the speech is "
              "too long for the text, a sign that it did not stop"),
        Param("retry_badcase_max_times", int, 3, "attempts at most when retrying", min=1, max=10, step=1),
        Param("retry_badcase_ratio_threshold", float, 6.0, "patches per text token counted as too long", min=1.0,
              max=50.0, step=0.5),
    ),
)
