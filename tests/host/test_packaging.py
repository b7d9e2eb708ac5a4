"""What installers read: pyproject.toml and requirements.txt agree and never name torch."""

import tomllib

import mizuoto

FORBIDDEN = ("torch", "torchaudio", "torchvision")


def name_of(requirement: str) -> str:
    for sep in "<>=!~[; ":
        requirement = requirement.split(sep)[0]
    return requirement.strip().lower()


def test_dependencies_agree_and_leave_torch_alone(repo):
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    deps = sorted(project["dependencies"])
    reqs = sorted(line.strip() for line in (repo / "requirements.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
    assert deps == reqs
    every = deps + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert not [r for r in every if name_of(r) in FORBIDDEN]
    assert {"test", "flash", "xformers", "sage"} <= set(project["optional-dependencies"])


def test_version_and_registry_block(repo):
    data = tomllib.loads((repo / "pyproject.toml").read_text())
    assert data["project"]["version"] == mizuoto.__version__
    comfy = data["tool"]["comfy"]
    # No `web` key: the pack's WEB_DIRECTORY already serves web/, and ComfyUI would load a second copy
    # of the extension under the project name whenever the folder is named otherwise.
    assert comfy["PublisherId"] and comfy["DisplayName"] == "Mizuoto" and "web" not in comfy
    assert data["tool"]["pytest"]["ini_options"] and data["tool"]["ruff"]


def test_readme_starts_with_the_two_commands(repo):
    text = (repo / "README.md").read_text()
    head = text[: text.index("## What it is")]
    assert "python -m mizuoto say" in head and "--engine dummy -o out.wav" in head
    assert "python -m pytest" in head and "<!-- test-command -->" in head
    # .ci/run runs exactly the README's test command.
    assert "<!-- test-command -->" in (repo / ".ci" / "run").read_text()
