"""Requests: each option declared once (``input/fields.py``) and read by every front end alike: the API's keywords
(``infoeval.compare(**kw)``, a request, a --config file), the command line's options (``cli/command.py``) and
their errors, spelled as each front end spells the field. No model is loaded."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
from cli_run import run_cli

import infoeval
from infoeval.comparison.request import CompareRequest, CompressRequest
from infoeval.errors import UsageError, flag_spelling, spell
from infoeval.input.fields import build, entries, given_field, group, names, option, own_flags
from infoeval.input.settings import MAX_TOKENS
from infoeval.quant.schemes import DEFAULT_SCHEMES


@dataclass(frozen=True)
class _Inner:
    size: int = option(3, help="A size.", flags=("--sz",))


@dataclass(frozen=True)
class _Outer:
    inner: _Inner = group(_Inner)
    label: str | None = option(None, help="A label.", parse=str.upper)
    given: frozenset = given_field()


def test_groups_flatten_in_place_and_build_checks_types_and_names():
    assert list(entries(_Outer)) == ["size", "label"]
    made = build(_Outer, {"size": 5, "label": "x"})
    assert made.inner.size == 5 and made.label == "X" and made.given == {"size", "label"}
    assert build(_Outer, {}) == _Outer()
    with pytest.raises(UsageError, match=r"^unknown keyword 'colour'; allowed: size, label"):
        build(_Outer, {"colour": 1})
    with pytest.raises(UsageError, match=r"^size '5' is not allowed; give an integer$"):
        build(_Outer, {"size": "5"})
    with flag_spelling(own_flags(entries(_Outer))), pytest.raises(UsageError, match=r"^--sz '5' is not allowed"):
        build(_Outer, {"size": "5"})


def test_spell_names_a_field_as_each_front_end_does():
    assert spell("max_tokens") == "max_tokens" and spell("top_k") == "top_k"
    with flag_spelling(own_flags(entries(CompareRequest))):  # the running command's own options
        assert spell("max_tokens") == "--max-tokens" and spell("top_k") == "--topk"
        assert spell("recipes") == "--recipe"
    with flag_spelling():
        assert spell("top_k") == "--top-k"  # a command without its own spelling


def test_names_splits_text_once_and_keeps_sequences():
    assert names("a, b,,c ") == ("a", "b", "c") == names(["a", "b", "c"])
    assert names(()) == ()


def test_request_defaults_are_the_commands():
    r = CompareRequest()
    assert r.text.max_tokens == MAX_TOKENS and r.window.ctx == 512 and r.variants.names == DEFAULT_SCHEMES.split(",")
    assert build(CompareRequest, {"protocol": "gptq"}).window.ctx == 2048


def test_precision_budget_is_max_tokens_only_where_given():
    assert build(CompareRequest, {"until_se": 0.01}).until().max_tokens is None
    assert build(CompareRequest, {"until_se": 0.01, "max_tokens": 512}).until().max_tokens == 512
    assert build(CompareRequest, {}).until() is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"floor_seed": -1}, "floor_seed -1 is not allowed; give an integer ≥ 0"),
        ({"order_seed": 2}, "order_seed needs until_se"),
        ({"alpha": 0.1}, "alpha needs baseline"),
        ({"top_k": 101}, "top_k 101 is not allowed"),
        ({"plan": "eager"}, "plan eager is not allowed"),
        ({"memory_budget": 0}, "memory_budget 0 is not allowed"),
        ({"max_tokens": "lots"}, "max_tokens 'lots' is not allowed"),
        ({"ctx": "64"}, "ctx '64' is not allowed; give an integer or None"),
        ({"floor": "some"}, "floor 'some' is not allowed; give one of sampled, full, off"),
        ({"schemas": "int8-channel"}, "unknown keyword 'schemas'"),
    ],
)
def test_api_refuses_bad_values_naming_the_keyword(kw, message):
    with pytest.raises(UsageError) as err:
        infoeval.compare(**kw)
    assert str(err.value).startswith(message), err.value


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--floor-seed", "-1"], "--floor-seed -1 is not allowed; give an integer ≥ 0"),
        (["--order-seed", "2"], "--order-seed needs --until-se"),
        (["--topk", "101"], "--topk 101 is not allowed"),
    ],
)
def test_command_line_refuses_the_same_values_naming_the_option(tmp_path, args, message):
    proc = run_cli(["quantize-compare", *args], cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"infoeval: error: {message}"), proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_api_takes_a_request_keywords_or_a_config_file(tmp_path):
    params = inspect.signature(infoeval.compare).parameters
    assert params["max_tokens"].default == MAX_TOKENS and params["plan"].default == "auto" and "config" in params
    assert "verify_coding" in inspect.signature(infoeval.compress_bits).parameters
    request = build(CompareRequest, {"floor_seed": 3})
    with pytest.raises(UsageError, match="give a CompareRequest or keywords, not both"):
        infoeval.compare(request, ctx=64)
    config = tmp_path / "c.toml"
    config.write_text('[quantize-compare]\nfloor-seed = -4\nschemes = ["int8-channel"]\n', encoding="utf-8")
    with pytest.raises(UsageError, match="^floor_seed -4 is not allowed"):
        infoeval.compare(config=config)
    config.write_text("[quantize-compare]\nschemas = 1\n", encoding="utf-8")
    with pytest.raises(UsageError, match="unknown key 'schemas' for quantize-compare"):
        infoeval.compare(config=config)
    with pytest.raises(UsageError, match="unknown keyword 'schemes'"):
        infoeval.compress_bits(schemes="int8-channel")
    assert build(CompressRequest, {"verify_coding": True}).verify_coding


def test_every_option_of_every_command_has_one_declaration():
    """Each option every command shows is a field of its request or outputs, declared once: its name, its first
    spelling and its help (or the command's own words for it) are the field's; and each command reaches its
    request through one generated callback (no option declared in a command's signature)."""
    import typer

    from infoeval.cli import app

    group_ = typer.main.get_command(app)
    assert len(group_.commands) == 16
    for name, command in group_.commands.items():
        declared = command.callback.declared
        shown = [p for p in command.params if p.name not in ("config", "help", "positional")]
        assert {p.name for p in shown} == set(declared), name
        for param in shown:
            entry = declared[param.name]
            assert entry.flag in param.opts or entry.opt.argument, (name, param.name, param.opts)
            assert param.help == command.callback.helps.get(param.name, entry.opt.text()), (name, param.name)


def test_the_api_takes_what_the_command_line_does():
    """Each API function's keywords are its request's: the command line's options (less the outputs) plus the
    Python-only ones (a loaded model's tokenizer, modules as variants, a progress bar)."""
    import inspect

    import typer

    from infoeval.cli import app
    from infoeval.output.destinations import Outputs

    functions = {
        "quantize-compare": infoeval.compare,
        "compress-bits": infoeval.compress_bits,
        "reference": infoeval.reference,
        "gate": infoeval.gate,
        "quantize": infoeval.quantize,
        "sensitivity": infoeval.sensitivity,
        "mix": infoeval.mix,
        "spec-accept": infoeval.spec_accept,
        "spec-decode": infoeval.spec_decode,
        "distill": infoeval.distill,
        "temperature": infoeval.temperature,
        "mutual-info": infoeval.mutual_info,
        "kl-fit": infoeval.kl_fit,
    }
    commands = typer.main.get_command(app).commands
    for name, function in functions.items():
        params = set(inspect.signature(function).parameters)
        keywords = (params - {"config", "candidate"}) | ({"model"} if "candidate" in params else set())
        options = {k for k, e in commands[name].callback.declared.items() if not issubclass(e.owner, Outputs)}
        python_only = {"tokenizer", "variants", "progress", "draft_tokenizer", "student_tokenizer"}
        assert options <= keywords <= options | python_only, name


def test_variants_are_typed_specs_parsed_once_at_the_edge(tmp_path):
    """What a user types (comma text) and what a caller passes (sequences, paths, specs) give the same specs; the
    names are checked once, each kind's clash named as that kind."""
    from infoeval.quant.recipe import Recipe
    from infoeval.quant.schemes import Scheme
    from infoeval.quant.variant_settings import Checkpoint, VariantSettings

    recipe = tmp_path / "mixed.toml"
    recipe.write_text('[recipe]\ndefault = "int4-g64"\n', encoding="utf-8")
    typed = build(
        VariantSettings, {"schemes": "int8-channel, int4-g32", "recipes": [str(recipe)], "checkpoints": "a,b"}
    )
    passed = VariantSettings(schemes=("int8-channel", "int4-g32"), recipes=(recipe,), checkpoints=["a", "b"])
    assert typed.specs == passed.specs and VariantSettings(schemes=typed.schemes).schemes == typed.schemes
    assert all(isinstance(s, Scheme) for s in typed.schemes) and isinstance(typed.recipes[0], Recipe)
    assert typed.checkpoints == (Checkpoint("a", "a"), Checkpoint("b", "b"))
    assert typed.names == ["int8-channel", "int4-g32", "mixed", "a", "b"]
    only = build(VariantSettings, {"recipes": [recipe]})
    assert only.schemes == () and only.names == ["mixed"]
    with pytest.raises(UsageError, match="scheme listed twice: int8-channel"):
        VariantSettings(schemes="int8-channel,INT8-channel")
    with pytest.raises(UsageError, match="two variants are named 'int4-g64' .a recipe is named after its file"):
        clash = tmp_path / "int4-g64.toml"
        clash.write_text('[recipe]\ndefault = "int4-g64"\n', encoding="utf-8")
        VariantSettings(schemes="int4-g64", recipes=(clash,))
    with pytest.raises(UsageError, match=r"^checkpoints: 'x/int8-channel.gguf' would be named 'int8-channel'"):
        VariantSettings(schemes="int8-channel", checkpoints="x/int8-channel.gguf")
    with pytest.raises(UsageError, match="^no quantization scheme given"):
        VariantSettings(schemes="")


def test_ctrl_c_while_importing_is_one_line(tmp_path):
    """Ctrl-C during the first seconds (torch and transformers being imported) ends as "infoeval: interrupted"."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'infoeval.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from infoeval.__main__ import main\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 130 and proc.stderr.strip() == "infoeval: interrupted", proc.stderr


def test_a_baseline_folder_without_a_run_says_so(tmp_path):
    from infoeval.errors import DataError
    from infoeval.gating.baseline import read_baseline

    with pytest.raises(DataError, match=r"^baseline folder '.*' holds no result.json"):
        read_baseline(tmp_path)
    with pytest.raises(DataError, match=r"^baseline file '.*' does not exist"):
        read_baseline(tmp_path / "missing.json")
