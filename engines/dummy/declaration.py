"""The dummy engine's declaration (no torch import)."""

from mizuoto.core.settings import Option
from mizuoto.engines.spec import EngineSpec, Param, Reference

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
    # The dummy takes its pitch from a reference recording when one is given.
    reference=Reference(0.5, 30.0, transcript=False, help="a recording whose pitch the dummy hums at"),
    speak_params=(
        Param("speed", float, 1.0, "speaking rate: 2.0 is twice as fast", min=0.25, max=4.0, step=0.05),
        Param("temperature", float, 0.9, "sampling temperature of the code decoder", min=0.05, max=2.0, step=0.05),
        Param("top_k", int, 50, "keep the k most likely codes (0: all)", min=0, max=1000, step=1),
        Param("top_p", float, 0.95, "keep the most likely codes up to this probability mass", min=0.05, max=1.0,
              step=0.01),
        Param("repetition_penalty", float, 1.05, "discourage repeating codes (1: off)", min=1.0, max=2.0,
              step=0.01),
    ),
)
