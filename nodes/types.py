"""ComfyUI wire types of the pack, and conversion to the host's AUDIO value."""

MODEL = "MIZUOTO_MODEL"
POLICY = "MIZUOTO_POLICY"
AUDIO = "AUDIO"
CATEGORY = "Mizuoto"

SEED_MAX = 2**64 - 1  # matches RequestContext and torch.manual_seed


def comfy_audio(waveform, sample_rate: int) -> dict:
    """(channels, samples) float32 -> ComfyUI's AUDIO: {"waveform": (1, C, T), "sample_rate"}."""
    return {"waveform": waveform.unsqueeze(0).contiguous(), "sample_rate": int(sample_rate)}
