"""What the variants of a run are before anything loads, parsed once, at the edge, from what a user types or a
caller passes: ``VariantSettings`` (the schemes and library methods of --schemes, recipe files, saved checkpoints,
the caller's modules, the noise floor) and ``CalibrationSettings`` (the text calibrated methods learn from).

Each variant is a typed spec with its ``name``: ``Scheme`` (infoeval's rounding), ``MethodScheme`` (a library's
quantizer, ``hqq:int4-g64``), ``Recipe`` (unit → scheme, a file), ``Checkpoint`` (a saved model: a folder, a .gguf
file or a hub id) or ``ModuleVariant`` (a module the caller built). Names are checked once, here: each its own,
none ``reference``. Inside, nothing splits comma text again. No torch import (a caller's modules are checked with
torch, which then is loaded already)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import SchemeError, UsageError, spell
from infoeval.input.fields import group, names, non_negative, one_of, option
from infoeval.quant.formats.presets import Format
from infoeval.quant.methods import MethodScheme, is_method, parse_method
from infoeval.quant.recipe import Recipe, read_recipe
from infoeval.quant.schemes import DEFAULT_SCHEMES, Scheme, check_unique, is_weight_scheme, parse_scheme

FLOOR_MODES = ("sampled", "full", "off")  # --floor: the noise floor on a seeded share of the windows, all, none


def check_floor(mode: str) -> str:
    """--floor's value, or a usage error naming the allowed ones."""
    return one_of("floor", FLOOR_MODES)(mode)


def parse_schemes(value, methods: bool = True, option_name: str = "schemes") -> tuple[Scheme | MethodScheme, ...]:
    """The one parser of a list of schemes, as typed (comma-separated text) or passed (a sequence of names or parsed
    schemes): each parsed once, ``<library>:<spec>`` as the library's method (refused where ``methods`` is False: a
    command that quantizes one layer at a time itself), the others as infoeval's own formats; a scheme listed twice,
    or none, is a usage error.

    >>> [s.name for s in parse_schemes("int8-channel, int4-g128")]
    ['int8-channel', 'int4-g128']
    """
    items = (
        names(value)
        if isinstance(value, str)
        else tuple(i if isinstance(i, str | Scheme | Format | MethodScheme) else str(i) for i in value)
    )
    items = tuple(i for i in items if not isinstance(i, str) or i.strip())
    if not items:
        raise SchemeError(f"no quantization scheme given; pass e.g. {spell(option_name)} int8-channel,int4-g128")
    return tuple(check_unique([parse_one(i, methods, option_name) for i in items]))


def parse_one(item, methods: bool = True, option_name: str = "scheme") -> Scheme | Format | MethodScheme:
    """One scheme, as typed or parsed: a library's method (``hqq:int4-g64``) where ``methods`` allows one, else
    infoeval's own format."""
    if isinstance(item, MethodScheme) or (isinstance(item, str) and is_method(item)):
        if not methods:
            name = item if isinstance(item, str) else item.name
            raise SchemeError(
                f"{spell(option_name)} {name.strip()}: a library's method is not taken here; give infoeval's own "
                "formats, e.g. int8-channel, int4-g128"
            )
        return item if isinstance(item, MethodScheme) else parse_method(item)
    return item if is_weight_scheme(item) else parse_scheme(item)


def one_quantization(scheme, recipe, methods: bool = True):
    """What --scheme or --recipe says to quantize with (one of them, or neither), parsed: the scheme's spec, the
    recipe read and checked, or None; both given is a usage error. Every command that takes the pair checks it here."""
    if scheme is not None and recipe is not None:
        raise UsageError(f"{spell('scheme')} and {spell('recipe')} both say how to quantize; give one")
    if recipe is not None:
        return recipe if isinstance(recipe, Recipe) else read_recipe(Path(recipe))
    return None if scheme is None else parse_one(scheme, methods)


def parse_recipes(value) -> tuple[Recipe, ...]:
    """Recipe files (or recipes already read), each read and checked now: a variant named after its file."""
    return tuple(r if isinstance(r, Recipe) else read_recipe(Path(r)) for r in value)


def checkpoint_name(source: str) -> str:
    """A checkpoint's name in results: its folder's name, a GGUF file's name without ``.gguf``, or the hub id."""
    path = Path(source)
    if source.lower().endswith(".gguf"):
        return path.name[: -len(".gguf")]
    return path.name if path.exists() else source


@dataclass(frozen=True)
class Checkpoint:
    """A saved checkpoint run as a variant: where it is (a folder, a .gguf file or a hub id) and its name."""

    source: str
    name: str


def parse_checkpoints(value) -> tuple[Checkpoint, ...]:
    """--checkpoints as typed (comma-separated) or passed (a sequence of sources or ``Checkpoint``s)."""
    items = names(value) if isinstance(value, str) else tuple(value)
    return tuple(c if isinstance(c, Checkpoint) else Checkpoint(str(c), checkpoint_name(str(c))) for c in items)


def parse_modules(value, taken: set[str]) -> tuple:
    """The caller's modules (``variants={"name": module}``, or ``(module, tokenizer)``) as ``ModuleVariant``s, each
    name checked against those ``taken`` before its module is."""
    if not value:
        return ()
    if isinstance(value, tuple):  # already parsed (a request replaced with one of its own groups)
        return value
    from infoeval.models.objects import module_variants

    return tuple(module_variants(value, taken))


# ---- options more than one request takes (each declared here, once) ------------------------------------------
def include_option():
    """--include GLOB (repeatable): also quantize the modules it matches."""
    return option(
        (),
        help="Also quantize modules matching this glob (repeatable), e.g. lm_head.",
        accepts=Sequence[str],
        cli=list[str],
        parse=tuple,
    )


def exclude_option():
    """--exclude GLOB (repeatable): leave the modules it matches unquantized."""
    return option(
        (),
        help="Do not quantize modules matching this glob (repeatable).",
        accepts=Sequence[str],
        cli=list[str],
        parse=tuple,
    )


def floor_option():
    """--floor sampled|full|off: the noise floor's windows."""
    return option(  # the noise floor's windows: sampled, full or off (measure/floor.py)
        "sampled",
        help="The noise floor (the reference with its weights moved by one bfloat16 rounding step) in the same run: "
        "sampled (a seeded share of the windows, ≤ 8 % of the forward passes, ≤ 10 % of the wall time), full "
        "(every window) or off.",
        parse=one_of("floor", FLOOR_MODES),
    )


def floor_seed_option():
    """--floor-seed: the noise floor's weights and its sampled windows."""
    return option(  # the floor's weights and its sampled windows
        0, help="The noise floor's seed: its weights and its sampled windows.", parse=non_negative("floor_seed")
    )


@dataclass(frozen=True)
class CalibrationSettings:
    """Calibration data for the methods that learn from text (``quant/methods/calibration.py``)."""

    text: str | None = option(  # a dataset name or a UTF-8 file; None: the evaluation's text, after its tokens
        None,
        keyword="calibration",
        help="Calibrated methods (autoround:…): the text they learn from, a dataset name or a UTF-8 file; default: "
        "the evaluated text after the evaluated tokens (docs/methods.md).",
    )
    samples: int = option(  # AutoRound's default
        128, keyword="calibration_samples", help="Calibrated methods: how many chunks of calibration text."
    )
    seqlen: int = option(512, keyword="calibration_seqlen", help="Calibrated methods: tokens per chunk.")
    seed: int = option(  # AutoRound's default
        42, keyword="calibration_seed", help="Calibrated methods: the seed that draws the chunks and seeds the method."
    )
    allow_overlap: bool = option(
        False,
        keyword="calibration_overlap",
        flags=("--calibration-overlap",),
        help="Allow calibration chunks that repeat the evaluated tokens (refused by default).",
    )

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise UsageError(f"{spell('calibration_samples')} {self.samples} is not allowed; give at least 1")
        if self.seqlen < 8:
            raise UsageError(f"{spell('calibration_seqlen')} {self.seqlen} is not allowed; give at least 8 tokens")


@dataclass(frozen=True)
class VariantSettings:
    """The variants of a run, each a typed spec (parsed in ``__post_init__``, from text, paths or specs alike), and
    the noise floor's settings."""

    schemes: tuple[Scheme | MethodScheme, ...] | None = option(  # None: the defaults, or none beside other variants
        None,
        help="Comma-separated schemes: int<bits>-channel | int<bits>-g<N> [-asym] (infoeval's rounding), bf16 | fp16 "
        "(the weights at 16 bits), or <library>:<spec> such as hqq:int4-g64 (the library's own quantizer and "
        "kernels; docs/methods.md).",
        accepts=str | Sequence[str] | None,
        cli=str,
        default_text=DEFAULT_SCHEMES,
    )
    include: tuple[str, ...] = include_option()
    exclude: tuple[str, ...] = exclude_option()
    recipes: tuple[Recipe, ...] = option(  # one mixed variant each, named after its file (quant/recipe.py)
        (),
        flags=("--recipe",),
        help="Recipe TOML (unit → scheme, as `infoeval mix` writes): one more variant, named after the file "
        "(repeatable).",
        accepts=Sequence[str | Path],
        cli=list[Path],
    )
    calibration: CalibrationSettings = group(CalibrationSettings, panel="Calibration")
    floor: str = floor_option()  # the noise floor's windows: sampled, full or off (measure/floor.py)
    floor_seed: int = floor_seed_option()  # the floor's weights and its sampled windows
    checkpoints: tuple[Checkpoint, ...] = option(
        (),
        help="Saved checkpoints to compare beside the schemes, comma-separated: folders (a library's quantized save, "
        "or a float one), .gguf files or hub ids; each must share the reference's tokenizer, and is named by its "
        "folder or file. Alone (without --schemes) only they are compared.",
        accepts=str | Sequence[str | Path],
        cli=str,
    )
    modules: tuple = option(  # ModuleVariant: a module the caller built (the API's ``variants``, name → module)
        (),
        keyword="variants",
        help="name → a model you built (or (model, tokenizer)), sharing the reference's tokenizer.",
        accepts=dict | None,
        command_line=False,
    )

    def __post_init__(self) -> None:
        check_floor(self.floor)
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen: parsed once, here)
        put("recipes", parse_recipes(self.recipes))
        put("checkpoints", parse_checkpoints(self.checkpoints))
        if self.schemes is None:
            put("schemes", () if self.recipes or self.checkpoints or self.modules else DEFAULT_SCHEMES)
        put("schemes", parse_schemes(self.schemes) if self.schemes else ())
        put("modules", parse_modules(self.modules, {s.name for s in (*self.schemes, *self.recipes)}))
        self._check_names()

    @property
    def plain(self) -> tuple[Scheme, ...]:
        """The schemes of infoeval's own rounding."""
        return tuple(s for s in self.schemes if is_weight_scheme(s))

    @property
    def methods(self) -> tuple[MethodScheme, ...]:
        """The libraries' methods."""
        return tuple(s for s in self.schemes if isinstance(s, MethodScheme))

    @property
    def specs(self) -> tuple:
        """Every variant, in the result's order: the schemes, the recipes, the methods, the modules, the
        checkpoints."""
        return (*self.plain, *self.recipes, *self.methods, *self.modules, *self.checkpoints)

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.specs]

    def _check_names(self) -> None:
        """At least one variant; each name its own (none 'reference'), else one line saying which to rename."""
        if not self.specs:
            raise SchemeError(f"no quantization scheme given; pass e.g. {spell('schemes')} int8-channel,int4-g128")
        seen = {"reference"}
        for spec in self.specs:
            if spec.name and spec.name not in seen:
                seen.add(spec.name)
            elif isinstance(spec, Recipe):
                raise UsageError(
                    f"two variants are named '{spec.name}' (a recipe is named after its file); rename the recipe file"
                )
            elif isinstance(spec, Checkpoint):
                raise UsageError(
                    f"{spell('checkpoints')}: '{spec.source}' would be named '{spec.name}', which is taken; give "
                    "checkpoints distinct folder or file names"
                )
            else:
                raise UsageError(
                    f"{spell('variants')}: the name {spec.name!r} is taken or empty; give each variant its own name"
                )
