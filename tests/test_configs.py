"""Every shipped file under configs/ (found recursively, so a new file is checked without editing this test) goes
through the CLI's own readers:

* command configs (every *.toml outside configs/gates/): for each command the file has keys for (a table named
  after the command, or top-level keys for the command its ``infoeval COMMAND --config`` usage line names),
  that command's parameters are parsed with ``--config FILE`` exactly as the command line does (click's
  ``make_context``: the eager ``--config`` callback ``options._load_config``, which refuses keys that are not the
  command's options, then every option's type conversion), and each key's value must arrive as the option's
  value. A table named after no command would be silently ignored by the loader, so it fails here. Scheme lists
  are also parsed by the scheme parser, --max-tokens by its own check, and datasets are looked up. The usage
  line in each file's comment must name the file itself and parse.
* limits files (configs/gates/*.toml): read by ``gate.limits.limits_from``, as ``gate --limits FILE`` does; every
  limit in the file must come out with the file's value.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import tomllib
import typer

from infoeval.cli import app
from infoeval.gating.limits import limits_from
from infoeval.input.settings import max_tokens_of
from infoeval.input.text import DATASETS
from infoeval.quant.variant_settings import parse_schemes

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
GATES = CONFIGS / "gates"
FILES = sorted(CONFIGS.rglob("*.toml"))
COMMAND_FILES = [f for f in FILES if GATES not in f.parents]
LIMITS_FILES = [f for f in FILES if GATES in f.parents]


def _id(path: Path) -> str:
    return str(path.relative_to(CONFIGS)) if CONFIGS in path.parents else path.name


@pytest.fixture(scope="module")
def group():
    """The click group typer builds for ``infoeval`` (typer may vendor its own click: use only its objects)."""
    return typer.main.get_command(app)


def test_configs_are_found():
    """The globs above see the shipped files (and so will see new ones)."""
    assert {_id(f) for f in COMMAND_FILES} >= {
        "quantize-compare.toml",
        "schemes-sweep.toml",
        "wikitext2-llamacpp.toml",
        "spec/spec-accept.toml",
    }
    assert {_id(f) for f in LIMITS_FILES} >= {"gates/default.toml", "gates/strict.toml"} and all(
        f.parent == GATES for f in LIMITS_FILES
    )


def _parse(group, command: str, path: Path):
    """Parse ``infoeval COMMAND --config PATH`` into the command's context (no command body is run)."""
    parent = group.context_class(group, info_name="infoeval")
    return group.commands[command].make_context(command, ["--config", str(path)], parent=parent)


def _as_given(value):
    """An option's parsed value in the form a TOML file gives it."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _targets(group, path: Path) -> dict[str, dict]:
    """command → the keys of ``path`` that ``--config`` applies to it: a table named after the command, or the
    top-level keys for each command that the file's usage comment (``infoeval COMMAND ... --config``) names."""
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    top = {k: v for k, v in data.items() if not isinstance(v, dict)}
    assert set(tables) <= set(group.commands), (
        f"{_id(path)}: tables {sorted(set(tables) - set(group.commands))} name no command"
    )
    named = re.findall(r"^#.*\binfoeval ([a-z][a-z0-9-]*)\b[^\n]*--config", text, flags=re.M)
    assert set(named) <= set(group.commands), f"{_id(path)}: its usage line names {named}"
    targets = dict(tables)
    if top:
        users = [c for c in named if c not in tables]
        assert users, (
            f"{_id(path)}: top-level keys {sorted(top)} but no `infoeval COMMAND --config` line says which command"
        )
        targets.update({c: top for c in users})
    assert set(named) <= set(targets), f"{_id(path)}: its usage line names {named}, it has keys for {sorted(targets)}"
    return targets


@pytest.mark.parametrize("path", COMMAND_FILES, ids=_id)
def test_command_config_loads_through_the_cli(group, path):
    targets = _targets(group, path)
    assert targets, f"{_id(path)}: no keys for any command"
    for command, section in targets.items():
        assert section, f"{_id(path)}: [{command}] is empty"
        ctx = _parse(group, command, path)
        for key, value in section.items():
            name = key.replace("-", "_")
            assert ctx.get_parameter_source(name).name == "DEFAULT_MAP", (command, key)  # the value came from the file
            want = ",".join(value) if name == "schemes" and isinstance(value, list) else value
            assert _as_given(ctx.params[name]) == want, (command, key, ctx.params[name])
            if name in ("schemes", "draft_scheme", "student_scheme", "scheme"):
                assert parse_schemes(ctx.params[name])
            if name == "max_tokens":
                max_tokens_of(ctx.params[name])
            if name == "dataset":
                assert ctx.params[name].lower() in DATASETS


@pytest.mark.parametrize("path", COMMAND_FILES, ids=_id)
def test_usage_line_parses(group, path):
    """The command line a config file's comment shows (``# infoeval COMMAND --config configs/FILE ...``) names this
    very file and parses, with the file, as that command's options."""
    lines = re.findall(r"^#\s*infoeval ([a-z][a-z0-9-]*) (.*--config.*)$", path.read_text(encoding="utf-8"), flags=re.M)
    assert lines, f"{_id(path)}: no usage line"
    for command, rest in lines:
        args = shlex.split(rest)
        i = args.index("--config")
        assert args[i + 1] == str(path.relative_to(ROOT)), (args[i + 1], _id(path))
        args[i + 1] = str(path)
        parent = group.context_class(group, info_name="infoeval")
        ctx = group.commands[command].make_context(command, args, parent=parent)
        assert ctx.params["config"] is not None


def test_a_bad_key_is_refused_by_the_same_parse(group, tmp_path):
    """The parse used above does validate keys: an option of another command is refused."""
    from infoeval.errors import UsageError

    bad = tmp_path / "bad.toml"
    bad.write_text("[quantize-compare]\nctx = 64\ndraft-layers = 2\n", encoding="utf-8")
    with pytest.raises(UsageError, match="unknown key 'draft-layers' for quantize-compare"):
        _parse(group, "quantize-compare", bad)
    bad.write_text('[quantize-compare]\nctx = "wide"\n', encoding="utf-8")
    with pytest.raises(typer.BadParameter, match="integer"):
        _parse(group, "quantize-compare", bad)


def test_misplaced_keys_are_caught(group, tmp_path):
    """A table named after no command (the loader would ignore it), or top-level keys with no command named."""
    typo = tmp_path / "typo.toml"
    typo.write_text("[quantize-compar]\nctx = 64\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="name no command"):
        _targets(group, typo)
    top = tmp_path / "top.toml"
    top.write_text("ctx = 64\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="which command"):
        _targets(group, top)
    top.write_text("# infoeval compress-bits --config top.toml\nctx = 64\n", encoding="utf-8")
    assert _targets(group, top) == {"compress-bits": {"ctx": 64}}
    assert _parse(group, "compress-bits", top).params["ctx"] == 64


@pytest.mark.parametrize("path", LIMITS_FILES, ids=_id)
def test_limits_file_loads_through_the_gate(path):
    table = tomllib.loads(path.read_text(encoding="utf-8"))["limits"]
    assert table, f"{_id(path)}: empty [limits]"
    limits = limits_from(path, {})
    assert {lim.key: lim.value for lim in limits} == table
    assert all(lim.side == lim.key.partition("_")[0] for lim in limits)


@pytest.mark.parametrize("name", ["default", "strict"])
def test_each_built_in_set_of_limits_is_its_file_in_configs(name, tmp_path, monkeypatch):
    """``--limits strict`` needs no file (a pip-installed infoeval has no configs/ folder); configs/gates/NAME.toml
    shows the same set as a file, and a file of that name in the working folder is read only as ./NAME."""
    from infoeval.gating.limits import LIMIT_SETS

    assert set(LIMIT_SETS) == {p.stem for p in GATES.glob("*.toml")}
    assert limits_from(name, {}) == limits_from(GATES / f"{name}.toml", {}) == limits_from(Path(name).name, {})
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text("[limits]\nmax_kl_mean = 0.5\n", encoding="utf-8")
    assert limits_from(name, {}) == limits_from(GATES / f"{name}.toml", {})
    assert [lim.value for lim in limits_from(f"./{name}", {})] == [0.5]
    assert [lim.value for lim in limits_from(name, {"max_kl_mean": 0.25}) if lim.key == "max_kl_mean"] == [0.25]


def test_an_unknown_limits_name_says_what_is_allowed(tmp_path, monkeypatch):
    from infoeval.errors import UsageError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        UsageError,
        match=r"^limits file 'lenient' does not exist; give an existing \.toml file or a "
        r"built-in set: default, strict$",
    ):
        limits_from("lenient", {})


def test_default_limits_file_is_the_built_in_default():
    """configs/gates/default.toml says it holds the built-in limits: it does."""
    from infoeval.gating.limits import DEFAULT_LIMITS

    assert tomllib.loads((GATES / "default.toml").read_text(encoding="utf-8"))["limits"] == DEFAULT_LIMITS
    assert limits_from(GATES / "default.toml", {}) == limits_from(None, {})
