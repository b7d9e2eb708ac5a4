"""The dummy engine's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import EngineSpec, Param

SAMPLE_RATES = (16000, 22050, 24000, 44100, 48000)

ENGINE = EngineSpec(
    id="dummy",
    display_name="Dummy",
    description="A tiny built-in model that turns text into a hummed melody; for testing workflows.",
    implementation="engine",
    weights_license="Apache-2.0",
    builtin_weights=True,
    load_options=(
        Option("sample_rate", int, 24000, SAMPLE_RATES, "output sample rate of the synthesiser"),
    ),
    speak_params=(
        Param("speed", float, 1.0, "speaking rate: 2.0 is twice as fast", min=0.25, max=4.0, step=0.05),
    ),
)
