"""The README's examples run as written: every command in them parses with the real argument parser, names
models the way `--model` takes them, and no command block has loose option lines after its command."""

import re
import shlex

import tomllib

from mizuoto import cli, engines
from mizuoto.host import download

COMMAND = re.compile(r"^(?:\.venv/bin/)?python3? -m mizuoto (?P<args>.*)$")


def code_blocks(text: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)]


def example_commands(text: str) -> list[str]:
    """The mizuoto commands of the README's blocks, the synopsis (options in [brackets]) left out; each
    block's other lines must be commands too (a line continued with a backslash joins its command)."""
    commands = []
    for block in code_blocks(text):
        if any(" [--" in line or " [engine" in line for line in block):
            continue  # the synopsis: what may be given, not an example
        joined, pending = [], ""
        for line in block:
            line = pending + line
            if line.endswith("\\"):
                pending = line[:-1]
                continue
            pending = ""
            joined.append(line)
        matches = [COMMAND.match(line.split(" && ")[-1]) for line in joined]
        if not any(matches):
            continue  # a settings file, an install step
        for line, match in zip(joined, matches, strict=True):
            if match:
                commands.append(match["args"])
            else:
                assert not line.startswith((" ", "\t", "[", "...")), f"a loose line after a command: {line!r}"
    return commands


def test_every_example_command_parses_and_names_real_models(repo):
    text = (repo / "README.md").read_text()
    commands = example_commands(text)
    assert len(commands) >= 9 and any(c.startswith("say ") for c in commands)
    parser = cli.build_parser()
    for command in commands:
        argv = shlex.split(command, comments=True)
        args = parser.parse_args(argv)  # an unknown option or a bad value ends the test here
        model = getattr(args, "model", None)
        if args.command == "say":
            spec = engines.get(args.engine)
            if model is None:
                assert spec.builtin_weights, f"{command}: {spec.id} needs --model"
            elif download.is_choice(model):
                assert download.repo_of(model) in spec.repos, f"{command}: {model} is not one of {spec.id}'s repos"
            else:
                assert model.startswith(f"{spec.id}/"), f"{command}: --model {model} is no model name or id"


def test_the_readme_states_the_licence_and_the_license_file_matches(repo):
    license_text = (repo / "LICENSE").read_text()
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in license_text
    readme = (repo / "README.md").read_text()
    assert "licensed under the Apache License 2.0 (`LICENSE`)" in readme
    assert "Save Audio" in readme and "Preview Audio" in readme
