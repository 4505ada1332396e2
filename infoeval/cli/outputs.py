"""The output options, declared once: ``@output_options(...)`` gives a command those of --csv --json --positions
--plot --out-dir --run-name -q it writes (and always --config), and they reach it as one ``outputs: Outputs``,
which checks them before the long run, names the files and writes them (``Outputs.emit``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infoeval.cli.options import (
    ConfigOpt,
    CsvOpt,
    JsonOpt,
    OutDirOpt,
    PlotOpt,
    PositionsOpt,
    QuietOpt,
    RunNameOpt,
    run_folder,
)
from infoeval.cli.signatures import extend, option

# the output options a command may take; "folder" stands for --out-dir and --run-name (the default run folder)
STANDARD = {"csv": CsvOpt, "json": JsonOpt, "positions": PositionsOpt, "plot": PlotOpt, "quiet": QuietOpt}
RUN_OUTPUTS = ("csv", "json", "positions", "plot", "folder", "quiet")  # what a command that scores a text writes


@dataclass(frozen=True)
class Outputs:
    """A command's output options (None: not given, or not an option of this command)."""

    csv: Path | None = None
    json: Path | None = None
    positions: Path | None = None
    plot: Path | None = None
    out_dir: Path | None = None
    run_name: str | None = None
    quiet: bool = False
    kinds: tuple[str, ...] = ("csv", "json", "positions")  # the tables this command writes
    folder: bool = True  # whether, no file being named, the tables go to a run folder

    def __post_init__(self) -> None:
        """The paths named, checked before anything runs: a file option that names a folder, a folder that is a
        file (one line, exit 2)."""
        from infoeval.output.results import check_file_option, check_folder_option

        for name in ("csv", "json", "positions", "plot"):
            check_file_option(getattr(self, name), f"--{name}")
        check_folder_option(self.out_dir, "--out-dir")

    def check(self) -> None:
        """Before the long run: a plot that cannot be drawn, a .parquet table without pyarrow (one line, exit 2)."""
        from infoeval.cli.output import check_plot
        from infoeval.output.results import check_frame_path

        check_plot(self.plot)
        for path in (self.csv, self.positions):
            check_frame_path(path)

    def reporter(self):
        """The progress bar on stderr (none with -q)."""
        from infoeval.output.report import RichReporter

        return RichReporter(enabled=not self.quiet)

    def paths(self, command: str, model: str, source: str) -> dict[str, Path]:
        """Where each table goes: those named, or (with a run folder) all of this command's tables in --out-dir or
        results/<run-name>/."""
        from infoeval.output.results import output_paths

        named = {k: getattr(self, k) for k in self.kinds if getattr(self, k) is not None}
        if not self.folder:
            return named
        paths = output_paths(
            self.csv, self.json, self.positions, self.out_dir, run_folder(command, model, source, self.run_name)
        )
        return {k: v for k, v in paths.items() if k in self.kinds}

    def emit(
        self,
        result,
        *,
        command: str,
        model: str,
        tables,
        source: str | None = None,
        positions=None,
        draw=None,
        extras: dict | Callable[[dict], dict] | None = None,
        also_written: tuple[str, ...] = (),
    ) -> dict:
        """Write, draw and print a result (``cli.output.emit``) into this command's paths; ``source``: the text's
        name in the run folder's name (default: the result's provenance); ``extras``: more files, or a function of
        the paths that gives them. Returns the result's JSON dict."""
        from infoeval.cli.output import as_json, emit

        data = as_json(result)
        paths = self.paths(command, model, source if source is not None else data["provenance"]["text"]["source"])
        return emit(
            data,
            paths=paths,
            tables=tables,
            positions=positions,
            plot=self.plot,
            draw=draw,
            extras=extras(paths) if callable(extras) else extras,
            also_written=also_written,
        )


def output_options(*names: str, **own):
    """Give a command the output options ``names`` (of csv, json, positions, plot, folder, quiet) with their standard
    help, those in ``own`` (name → its own option type, e.g. a --csv that says what its rows are) and --config,
    after its other options; they reach it as one ``outputs: Outputs`` argument."""
    wanted = set(names) | set(own)
    unknown = wanted - set(STANDARD) - {"folder"}
    if unknown:
        raise ValueError(f"unknown output options {sorted(unknown)}")
    params = [
        option(name, own.get(name, STANDARD[name]), False if name == "quiet" else None)
        for name in STANDARD
        if name in wanted
    ]
    if "folder" in wanted:
        params += [option("out_dir", OutDirOpt, None), option("run_name", RunNameOpt, None)]
    params.append(option("config", ConfigOpt, None))
    kinds = tuple(k for k in ("csv", "json", "positions") if k in wanted)

    def build(values: dict) -> Outputs:
        given = {p.name: values[p.name] for p in params if p.name != "config"}
        return Outputs(**given, kinds=kinds, folder="folder" in wanted)

    return lambda command: extend(command, "outputs", params, build)


def scoring_options(
    *outputs: str, windows: bool = True, calibration: bool = False, argument=None, what: str = "the model", **own
):
    """The options of a command that scores a text with a model, each family defined once: the model as MODEL or
    --model (``model_options``; ``argument``: another positional, e.g. TARGET), the calibration options with
    ``calibration``, the text (``windows``: and window) and device options (``run_options``) and the output options
    ``outputs`` (``output_options``; ``own``: those with their own help)."""
    from infoeval.cli.options import ModelArg, model_options, run_options
    from infoeval.cli.variant_options import calibration_options

    def decorate(command):
        command = model_options(argument or ModelArg, what=what)(command)
        command = calibration_options(command) if calibration else command
        return output_options(*outputs, **own)(run_options(windows)(command))

    return decorate
