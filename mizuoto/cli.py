"""`python -m mizuoto`: say, transcribe, convert, models, engines, doctor, save-dummy.

CPU settings are applied before torch is imported, so nothing at module level here imports torch.
Every user error prints one line and exits with status 2, leaving no partial output file.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from mizuoto.audio.files import SAMPLE_FORMATS
from mizuoto.core.compute import cpu
from mizuoto.core.errors import MizuotoError
from mizuoto.engines.spec import CONVERT, SPEAK, TRANSCRIBE

EXIT_USER_ERROR = 2


def _add_engine_params(group, kind: str) -> None:
    """Every engine parameter of engines of `kind` as an option named like the node input."""
    from mizuoto import engines

    seen = {}
    for spec in engines.of_kind(kind).values():
        for param in spec.speak_params:
            seen.setdefault(param.name, (param, []))[1].append(spec.id)
    for name, (param, owners) in seen.items():
        if param.kind is bool:
            # `--word-timestamps` alone means true; `--word-timestamps false` spells it out
            group.add_argument(param.cli_flag, dest=f"param_{name}", default=None, metavar="BOOL", nargs="?",
                               const=True, type=_boolean,
                               help=f"{param.help} (default {param.default}; {', '.join(owners)})")
            continue
        # named choices (speakers) are matched without regard to case after parsing (engine_params), so the
        # parser lists them in the help rather than refusing another case
        numbers = param.kind is not str and param.choices and len(param.choices) < 12
        listed = [str(c) for c in param.choices or () if c] if param.kind is str else []
        group.add_argument(param.cli_flag, dest=f"param_{name}", type=param.kind, default=None,
                           metavar=param.kind.__name__.upper(), choices=param.choices if numbers else None,
                           help=f"{param.help}{': ' + ', '.join(listed) if 0 < len(listed) < 12 else ''} "
                                f"(default {param.default}; {', '.join(owners)})")


def engine_params(args, spec) -> dict:
    """The engine parameters given on the command line. A named choice (a speaker) is matched without regard
    to case, as upstream matches it, and passed in the list's spelling; one on no list reaches the
    engine's one-line error as it was typed."""
    params = {k[len("param_"):]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}
    for param in spec.speak_params:
        value = params.get(param.name)
        if param.kind is str and param.choices and isinstance(value, str):
            params[param.name] = {str(c).lower(): c for c in param.choices}.get(value.strip().lower(), value)
    return params


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    from mizuoto import engines

    parser = argparse.ArgumentParser(
        prog="python -m mizuoto",
        description="Mizuoto: native PyTorch text-to-speech engines on one acceleration runtime.",
        epilog="Run 'python -m mizuoto COMMAND --help' for each command's options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    say = sub.add_parser("say", help="speak a text into an audio file",
                         description="Speak TEXT with an engine and write an audio file (WAV, FLAC, Ogg Vorbis "
                                     "or MP3, after the output's suffix); prints the run report as JSON.")
    say.add_argument("text", metavar="TEXT", nargs="?", help="what to say (or --text-file)")
    say.add_argument("--text-file", metavar="FILE", help="read the text from a UTF-8 file; - reads standard input")
    say.add_argument("--engine", required=True, metavar="ID",
                     help=f"engine to use: {', '.join(engines.of_kind(SPEAK))}")
    _add_model_arguments(say, "default: the engine's built-in weights, where it has them")
    _add_companion_arguments(say, SPEAK)
    _add_audio_request_arguments(say)
    say.add_argument("--ref-audio", metavar="FILE", help="reference voice recording: WAV, FLAC, OGG, Opus or MP3 "
                                                        "(engines that take one)")
    say.add_argument("--ref-text", metavar="TEXT", help="what the reference recording says")
    say.add_argument("--extra-ref-audio", metavar="FILE", action="append", default=[],
                     help="another recording of the same voice, whose timbre is averaged with the reference's "
                          "(engines that take them: GPT-SoVITS v2 family); repeat for several")
    say.add_argument("--transcriber", metavar="MODEL", help="Whisper model (as --model) that transcribes the reference "
                                                            "when --ref-text is not given (engines that read it)")
    _add_engine_params(say.add_argument_group("engine parameters"), SPEAK)

    change = sub.add_parser("convert", help="convert a recording into another voice",
                            description="Convert SOURCE (speech or singing) into the voice of --reference and write "
                                        "an audio file (WAV, FLAC, Ogg Vorbis or MP3, after the output's suffix); "
                                        "prints the run report as JSON.")
    change.add_argument("source", metavar="SOURCE", help="the recording to convert: WAV, FLAC, OGG, Opus or MP3")
    change.add_argument("--reference", required=True, metavar="FILE",
                        help="a recording of the voice to convert into: WAV, FLAC, OGG, Opus or MP3")
    change.add_argument("--engine", required=True, metavar="ID",
                        help=f"engine to use: {', '.join(engines.of_kind(CONVERT)) or 'none yet'}")
    _add_model_arguments(change, "required unless the engine has built-in weights")
    streaming = change.add_mutually_exclusive_group()
    streaming.add_argument("--stream", type=_positive_float, metavar="SECONDS",
                           help="convert SOURCE in chunks of SECONDS, each on its own (the engine's library "
                                "streaming; Seed-VC's real-time model), and report each chunk's latency")
    streaming.add_argument("--live", type=_positive_float, metavar="BLOCK", nargs="?", const=0.0,
                           help="convert SOURCE as the engine's real-time app does, in blocks of BLOCK seconds "
                                "(default: the engine's, 0.18 s for Seed-VC) with its context windows and "
                                "cross-fade, and report each block's latency")
    _add_audio_request_arguments(change)
    _add_engine_params(change.add_argument_group("engine parameters"), CONVERT)

    hear = sub.add_parser("transcribe", help="transcribe an audio file",
                          description="Transcribe an audio file (WAV, FLAC, OGG, Opus or MP3 at any rate; 16 kHz "
                                      "16-bit mono is bit-exact to upstream) and print the text, or with --json "
                                      "the whole result.")
    hear.add_argument("audio", metavar="FILE", help="audio to transcribe")
    hear.add_argument("--engine", default="whisper", metavar="ID",
                      help=f"engine to use: {', '.join(engines.of_kind(TRANSCRIBE)) or 'none'} (default whisper)")
    _add_model_arguments(hear, "an openai .pt file, a Hugging Face folder, or e.g. hf:openai/whisper-tiny",
                         required=True)
    hear.add_argument("--seed", type=int, metavar="N", help="seed of temperature-fallback sampling")
    hear.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    hear.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default: float32)")
    hear.add_argument("--policy", metavar="P", help="attention policy (default: the engine's setting)")
    hear.add_argument("--threads", type=_positive_int, metavar="N", default=0,
                      help="CPU threads torch uses (default: torch's own choice; as openai-whisper's --threads)")
    hear.add_argument("--json", action="store_true", help="print the whole result as JSON (with the language "
                                                          "probabilities when the language was detected)")
    _add_engine_params(hear.add_argument_group("decoding options (openai-whisper's names and defaults)"),
                       TRANSCRIBE)

    listing = sub.add_parser("models", help="list the models installed and the ones that can be downloaded",
                             description="List each engine's installed models (in --models-dir/<engine>/) and the "
                                         "Hugging Face repos that --model hf:<owner>/<name> downloads there.")
    listing.add_argument("--engine", metavar="ID", help="only this engine")
    listing.add_argument("--models-dir", metavar="DIR", help=f"the models folder (default: {catalog_default()})")
    listing.add_argument("--json", action="store_true", help="print the listing as JSON")

    sub.add_parser("engines", help="list the engines and their parameters")

    doctor = sub.add_parser("doctor", help="report the environment, settings, engines and models as JSON")
    doctor.add_argument("--settings", metavar="FILE", help="settings file to check")
    doctor.add_argument("--text", action="store_true", help="print the report for reading, not as JSON")

    save = sub.add_parser("save-dummy", help="write the dummy engine's weights to a safetensors file")
    save.add_argument("path", metavar="PATH.safetensors")
    save.add_argument("--weights-seed", type=int, default=0, help="seed the weights are drawn from")
    return parser


def _add_audio_request_arguments(parser) -> None:
    """What every request that writes audio takes: seed, policy, licence, device, settings, output."""
    parser.add_argument("--seed", type=int, metavar="N",
                        help="random seed, 0 to 2^64-1 (default: a fresh one, printed in the report)")
    parser.add_argument("--policy", metavar="P", help="attention policy (default: the engines.<id>.attention "
                                                      "setting, auto unless changed)")
    parser.add_argument("--accept-license", action="store_true",
                        help="accept the weights' licence where the engine asks for it (F5-TTS: CC-BY-NC-4.0, "
                             "non-commercial); as the loader node's accept_license")
    parser.add_argument("--strict", action="store_true",
                        help="refuse to load when the named attention backend cannot run here")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default: float32)")
    parser.add_argument("--settings", metavar="FILE", help="settings file (default: $MIZUOTO_SETTINGS or "
                                                           "~/.config/mizuoto/settings.toml)")
    parser.add_argument("--format", default=None, choices=SAMPLE_FORMATS,
                        help="sample format of a .wav (pcm16, pcm24, float32) or .flac (pcm16, pcm24) output "
                             "(default: pcm16); .ogg and .mp3 have none")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.wav",
                        help="file to write; its suffix picks the format: .wav, .flac, .ogg or .mp3")


def catalog_default() -> str:
    from mizuoto.host import catalog

    return catalog.DEFAULT_BASE


def _add_companion_arguments(parser, kind: str) -> None:
    """The companion file of every engine of `kind` that has one (GPT-SoVITS's --gpt-weights)."""
    from mizuoto import engines

    for spec in engines.of_kind(kind).values():
        if spec.companion is not None:
            parser.add_argument(spec.companion.cli_flag, dest=f"companion_{spec.id}", metavar="FILE",
                                help=f"{spec.companion.help} ({spec.id}; default: the one beside --model)")


def companion_override(args, spec) -> dict:
    """The engine's companion file as a load-option override ({} when it has none or none was given)."""
    from mizuoto.host import catalog

    given = getattr(args, f"companion_{spec.id}", None)
    if spec.companion is None or given is None:
        return {}
    return {f"engines.{spec.id}.load_options.{spec.companion.option}":
            catalog.resolve_companion(spec, given, args.models_dir)}


def _add_model_arguments(parser, default: str, required: bool = False) -> None:
    parser.add_argument("--model", metavar="MODEL", required=required,
                        help=f"a model folder or file; a model's name in --models-dir/<engine>/; or a downloadable "
                             f"id, hf:<owner>/<name>, fetched into --models-dir/<engine>/ on first use "
                             f"('python -m mizuoto models' lists them) ({default})")
    parser.add_argument("--models-dir", metavar="DIR",
                        help=f"where models are installed and downloaded (default: {catalog_default()}, laid out "
                             f"as ComfyUI's models/tts: <engine>/<model>)")


def read_text(args) -> str:
    """The text to speak: the argument, or --text-file's contents (standard input for -)."""
    from mizuoto.core.errors import InputError

    if args.text_file is not None and args.text is not None:
        raise InputError("give the text either as an argument or with --text-file, not both")
    if args.text_file is None:
        if args.text is None:
            raise InputError("no text: give it as an argument, or with --text-file FILE (- for standard input)")
        return args.text
    if args.text_file == "-":
        data, where = sys.stdin.buffer.read(), "standard input"
    else:
        try:
            with open(args.text_file, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise InputError(f"cannot read the text file {args.text_file}: {exc.strerror or exc}") from None
        where = f"the text file {args.text_file}"
    try:
        return data.decode("utf-8-sig")  # a byte-order mark, as Windows editors write, is not text
    except UnicodeDecodeError as exc:
        raise InputError(f"{where} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def cmd_say(args) -> int:
    from mizuoto import engines
    from mizuoto.audio import files
    from mizuoto.core.errors import InputError
    from mizuoto.host import catalog, load_model, speak, startup

    spec = engines.get(args.engine)
    if spec.kind != SPEAK:
        raise InputError(f"engine {spec.id} does not speak; use python -m mizuoto transcribe")
    text = read_text(args)
    if not text.strip():
        raise InputError("text is empty; give some words to speak")
    if spec.license_acceptance and not args.accept_license:
        raise InputError(f"{spec.display_name} weights are licensed under {spec.weights_license}; read the licence "
                         f"and add --accept-license to accept it")
    output = files.check_output(args.output, args.format)  # before any work, so a bad path costs nothing
    # a bad reference file costs nothing either
    reference = files.read(args.ref_audio, "reference audio") if args.ref_audio else None
    extra_references = [files.read(path, "extra reference audio") for path in args.extra_ref_audio]
    startup.start(args.settings)
    params = engine_params(args, spec)
    model = catalog.resolve(spec, args.model, args.models_dir) if args.model else None
    overrides = companion_override(args, spec)
    loaded = load_model(spec.id, model, device=args.device, dtype=args.dtype, policy=args.policy,
                        strict=args.strict, settings_file=args.settings, overrides=overrides)
    transcriber = None
    if args.transcriber:
        whisper = engines.get("whisper")
        transcriber = load_model("whisper", catalog.resolve(whisper, args.transcriber, args.models_dir),
                                 device=args.device)
    speech = speak(loaded, text, seed=args.seed, params=params, reference=reference, reference_text=args.ref_text,
                   transcriber=transcriber, extra_references=extra_references)
    files.write(output, speech.waveform, speech.sample_rate, args.format)
    print(json.dumps({**speech.report, "output": str(output)}, indent=2))
    return 0


def cmd_convert(args) -> int:
    from mizuoto import engines
    from mizuoto.audio import files
    from mizuoto.core.errors import InputError
    from mizuoto.host import catalog, convert, load_model, startup

    spec = engines.get(args.engine)
    if spec.kind != CONVERT:
        raise InputError(f"engine {spec.id} does not convert voices; use one of: "
                         f"{', '.join(engines.of_kind(CONVERT)) or 'none is installed'}")
    if spec.license_acceptance and not args.accept_license:
        raise InputError(f"{spec.display_name} weights are licensed under {spec.weights_license}; read the licence "
                         f"and add --accept-license to accept it")
    output = files.check_output(args.output, args.format)  # before any work, so a bad path costs nothing
    source = files.read(args.source, "source audio")
    reference = files.read(args.reference, "reference audio")
    startup.start(args.settings)
    params = engine_params(args, spec)
    model = catalog.resolve(spec, args.model, args.models_dir) if args.model else None
    loaded = load_model(spec.id, model, device=args.device, dtype=args.dtype, policy=args.policy,
                        strict=args.strict, settings_file=args.settings)
    if args.stream or args.live is not None:
        return _convert_streaming(loaded, source, reference, args, params, output)
    speech = convert(loaded, source, reference, seed=args.seed, params=params)
    files.write(output, speech.waveform, speech.sample_rate, args.format)
    print(json.dumps({**speech.report, "output": str(output)}, indent=2))
    return 0


TAIL_SECONDS = 0.05  # convert --stream: a shorter last block is joined to the one before it


def _convert_streaming(loaded, source, reference, args, params, output) -> int:
    """convert --stream / --live: the source in chunks, each piece's latency on stderr as it comes; the file is
    written once the stream has ended (a failed stream leaves no partial file)."""
    import torch

    from mizuoto.audio import files
    from mizuoto.host import convert_stream

    waveform, rate = source
    live = None if args.live is None else ({"block_time": args.live} if args.live else {})
    # live: the file goes in as a sound card's 10 ms callbacks would (the stream makes its own blocks)
    size = max(1, round((args.stream or 0.01) * rate))
    starts = list(range(0, waveform.shape[-1], size))
    if live is None and len(starts) > 1 and waveform.shape[-1] - starts[-1] < rate * TAIL_SECONDS:
        starts.pop()  # a remainder too short to convert on its own goes with the chunk before it
    ends = starts[1:] + [waveform.shape[-1]]
    blocks = ((waveform[..., start:end], rate) for start, end in zip(starts, ends, strict=True))
    stream = convert_stream(loaded, blocks, reference, seed=args.seed, params=params, live=live)
    pieces = []
    for piece in stream:
        pieces.append(piece.waveform)
        print(f"block {piece.report['chunk']}: {piece.report['audio_seconds']:.3f} s of audio in "
              f"{piece.report['wall_seconds'] * 1000:.0f} ms", file=sys.stderr)
    files.write(output, torch.cat(pieces, dim=-1), stream.report["sample_rate"], args.format)
    print(json.dumps({**stream.report, "output": str(output)}, indent=2))
    return 0


def cmd_transcribe(args) -> int:
    from mizuoto.audio import files
    from mizuoto.core.errors import InputError
    from mizuoto.host import catalog, load_model, startup
    from mizuoto.host.local import transcribe

    spec = engines_get(args.engine)
    if spec.kind != TRANSCRIBE:
        raise InputError(f"engine {spec.id} does not transcribe; use --engine whisper")
    waveform, rate = files.read(args.audio)
    startup.start()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    params = engine_params(args, spec)
    loaded = load_model(spec.id, catalog.resolve(spec, args.model, args.models_dir), device=args.device,
                        dtype=args.dtype, policy=args.policy)
    result = transcribe(loaded, waveform, rate, params=params, seed=args.seed)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else result["text"].strip())
    return 0


def engines_get(engine_id: str):
    from mizuoto import engines

    return engines.get(engine_id)


def cmd_models(args) -> int:
    from mizuoto import engines
    from mizuoto.host import catalog

    specs = [engines.get(args.engine)] if args.engine else list(engines.all_engines().values())
    listing = {spec.id: catalog.engine_report(spec, args.models_dir) for spec in specs}
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    for spec in specs:
        report = listing[spec.id]
        print(f"{spec.id} ({spec.display_name}): models in {report['folder']}")
        if report["builtin_weights"]:
            print("  built-in weights (no --model needed)")
        for entry in report["installed"]:
            print(f"  installed    --model {entry['name']}")
        for entry in report["downloadable"]:
            state = "downloaded" if entry["downloaded"] else "to download"
            about = f"  ({entry['about']})" if entry.get("about") else ""
            print(f"  {state:<12} --model {entry['choice']}{about}")
        if not (report["installed"] or report["downloadable"] or report["builtin_weights"]):
            print(f"  none: put a model in {report['folder']} (the README's {spec.display_name} section names "
                  f"its files)")
    return 0


def cmd_engines(args) -> int:
    from mizuoto import engines

    for spec in engines.all_engines().values():
        print(f"{spec.id}: {spec.display_name} - {spec.description}")
        print(f"  weights licence: {spec.weights_license}"
              + ("  (must be accepted before loading)" if spec.license_acceptance else ""))
        for param in spec.speak_params:
            print(f"  {param.cli_flag} {param.kind.__name__} (default {param.default}): {param.help}")
    return 0


def cmd_doctor(args) -> int:
    from mizuoto import doctor, doctor_text

    report = doctor.report(settings_file=args.settings)
    print(doctor_text.readable(report) if args.text else json.dumps(report, indent=2))
    return 0


def cmd_save_dummy(args) -> int:
    from mizuoto.engines.dummy import engine

    path = engine.save(engine.build(weights_seed=args.weights_seed), args.path)
    print(json.dumps({"saved": str(path), "weights_seed": args.weights_seed}))
    return 0


COMMANDS = {"say": cmd_say, "transcribe": cmd_transcribe, "convert": cmd_convert, "models": cmd_models,
            "engines": cmd_engines,
            "doctor": cmd_doctor,
            "save-dummy": cmd_save_dummy}


def main(argv: Sequence[str] | None = None) -> int:
    cpu.apply()  # before anything imports torch
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except MizuotoError as exc:
        print(f"mizuoto: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("mizuoto: interrupted", file=sys.stderr)
        return 130
