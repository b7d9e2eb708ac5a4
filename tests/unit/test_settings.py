import json

import pytest

from mizuoto.core import settings as S
from mizuoto.core.errors import SettingsError
from mizuoto.core.options import RuntimeOptions

ENGINES = [S.EngineSettings("dummy", (S.Option("sample_rate", int, 24000, (16000, 24000)),)),
           S.EngineSettings("other", (S.Option("fused", bool, False),))]
SCHEMA = S.Schema.build(ENGINES)


def load(file=None, environ=None, overrides=None):
    return S.load(SCHEMA, file=file, environ=environ or {}, overrides=overrides)


def test_defaults():
    got = load()
    assert got["compute.fast"] == ()
    assert got["compute.compile"] is False
    assert got["compute.cuda_graphs"] is True
    assert got["engines.dummy.attention"] == "auto"
    assert got["engines.dummy.load_options.sample_rate"] == 24000
    assert got.sources["compute.compile"] == "default"


def test_layers_file_then_environment_then_arguments(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("[compute]\ncompile = true\ncuda_graphs = false\n"
                 "[engines.dummy.load_options]\nsample_rate = 16000\n")
    env = {"MIZUOTO_COMPUTE__CUDA_GRAPHS": "1", "MIZUOTO_COMPUTE__FAST": "tf32,cudnn_benchmark"}
    got = load(f, env, {"compute.compile": False})
    assert got["compute.compile"] is False and got.sources["compute.compile"] == "arguments"
    assert got["compute.cuda_graphs"] is True and got.sources["compute.cuda_graphs"] == "MIZUOTO_COMPUTE__CUDA_GRAPHS"
    assert got["engines.dummy.load_options.sample_rate"] == 16000 and got.sources[
        "engines.dummy.load_options.sample_rate"] == str(f)
    assert got["compute.fast"] == ("tf32", "cudnn_benchmark")


def test_json_file_and_settings_file_from_environment(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"compute": {"fast": ["fp16_accumulation"]}}))
    got = load(environ={"MIZUOTO_SETTINGS": str(f)})
    assert got["compute.fast"] == ("fp16_accumulation",)


def test_default_file_in_config_home(tmp_path):
    (tmp_path / "mizuoto").mkdir()
    (tmp_path / "mizuoto" / "settings.toml").write_text("compute.compile = true\n")
    assert load(environ={"XDG_CONFIG_HOME": str(tmp_path)})["compute.compile"] is True


@pytest.mark.parametrize("raw,expected", [("all", S.FAST_SWITCHES), ("none", ()), ("", ()), (True, S.FAST_SWITCHES),
                                          (False, ()), (["cudnn_benchmark", "tf32"], ("tf32", "cudnn_benchmark"))])
def test_fast_values(raw, expected):
    assert load(overrides={"compute.fast": raw})["compute.fast"] == expected


def test_other_variables_are_not_settings():
    # MIZUOTO_SETTINGS-like names without "__" belong to their owners (e.g. MIZUOTO_TEST_ACCEL).
    assert load(environ={"MIZUOTO_TEST_ACCEL": "count"})["compute.compile"] is False


@pytest.mark.parametrize("where,key", [
    ("env", "MIZUOTO_COMPUTE__FSAT"), ("arg", "compute.fsat"), ("arg", "engines.nope.attention"),
    ("arg", "engines.dummy.load_options.nope"), ("env", "MIZUOTO_ENGINES__DUMMY__COLOUR")])
def test_unknown_keys_are_rejected_in_one_line(where, key):
    with pytest.raises(SettingsError) as err:
        if where == "env":
            load(environ={key: "1"})
        else:
            load(overrides={key: 1})
    message = str(err.value)
    assert "unknown setting" in message and "\n" not in message
    assert (key if where == "env" else key) in message or key.lower().replace("mizuoto_", "") in message


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(SettingsError, match="did you mean 'compute.fast'"):
        load(overrides={"compute.fsat": "tf32"})


def test_unknown_key_in_file_names_the_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("[compute]\ncompiled = true\n")
    with pytest.raises(SettingsError, match=str(f)):
        load(f)


@pytest.mark.parametrize("key,raw,allowed", [
    ("compute.compile", "maybe", "true or false"),
    ("compute.cuda_graphs", 2, "true or false"),
    ("compute.fast", "tf32,warp", "tf32, fp16_accumulation"),
    ("engines.dummy.attention", "turbo", "one of auto"),
    ("engines.dummy.load_options.sample_rate", "8000", "one of 16000, 24000"),
    ("engines.dummy.load_options.sample_rate", True, "one of 16000, 24000"),
    ("engines.other.load_options.fused", "sometimes", "true or false"),
])
def test_bad_values_name_key_source_and_allowed(key, raw, allowed):
    with pytest.raises(SettingsError) as err:
        load(overrides={key: raw})
    message = str(err.value)
    assert key in message and "arguments" in message and allowed in message and repr(raw) in message
    assert "\n" not in message


def test_bad_value_from_environment_names_the_variable():
    with pytest.raises(SettingsError, match="MIZUOTO_COMPUTE__COMPILE"):
        load(environ={"MIZUOTO_COMPUTE__COMPILE": "perhaps"})


def test_missing_or_broken_file(tmp_path):
    with pytest.raises(SettingsError, match="does not exist"):
        load(tmp_path / "absent.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[compute\n")
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load(broken)


def test_env_name_round_trips():
    key = "engines.dummy.load_options.sample_rate"
    assert S.env_name(key) == "MIZUOTO_ENGINES__DUMMY__LOAD_OPTIONS__SAMPLE_RATE"
    assert load(environ={S.env_name(key): "16000"})[key] == 16000


def test_runtime_options_are_read_at_each_load(monkeypatch):
    first = RuntimeOptions.read("dummy", load())
    second = RuntimeOptions.read("dummy", load(environ={"MIZUOTO_COMPUTE__COMPILE": "true",
                                                        "MIZUOTO_ENGINES__DUMMY__LOAD_OPTIONS__SAMPLE_RATE": "16000"}))
    assert (first.compile, second.compile) == (False, True)
    assert dict(second.load_options) == {"sample_rate": 16000}
    assert second.report()["load_options"] == {"sample_rate": 16000}
    with pytest.raises(TypeError):
        second.load_options["sample_rate"] = 1  # read-only once loaded
