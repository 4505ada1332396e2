"""The output options, declared once: ``@output_options(...)`` gives a command those of --csv --json --positions
--plot --out-dir --run-name -q it writes (and always --config), and they reach it as one ``outputs: Outputs``,
which checks them before the long run, names the files and writes them (``Outputs.emit``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from infoeval.input.fields import option

RUN_OUTPUTS = ("csv", "json", "positions", "plot", "folder", "quiet")  # what a command that scores a text writes


@dataclass(frozen=True)
class Outputs:
    """A command's output options (None: not given, or not an option of this command)."""

    csv: Path | None = option(
        None, help="Write the summary CSV here (a row per variant, or per compressor).", parse=Path, panel="Output"
    )
    json: Path | None = option(None, help="Write metrics and provenance as JSON here.", parse=Path, panel="Output")
    positions: Path | None = option(None, help="Write per-position columns as CSV here.", parse=Path, panel="Output")
    plot: Path | None = option(
        None,
        help="Also draw the results into this .png (or .svg, .pdf); needs matplotlib, the 'plot' extra.",
        parse=Path,
        panel="Output",
    )
    html: Path | None = option(
        None,
        flags=("--html",),
        help="Also write the run's report page here: the text coloured by KL (or NLL, entropy), each token's values "
        "and top-5 on hover (implies --topk 5).",
        parse=Path,
        panel="Output",
    )
    out_dir: Path | None = option(
        None,
        help="Folder for summary.csv, result.json, positions.csv (default results/<run-name>/).",
        parse=Path,
        panel="Output",
    )
    run_name: str | None = option(None, help="Name of the run folder under results/.", panel="Output")
    quiet: bool = option(False, flags=("--quiet", "-q"), help="No progress bar.", panel="Output")
    kinds: tuple[str, ...] = ("csv", "json", "positions")  # the tables this command writes
    folder: bool = True  # whether, no file being named, the tables go to a run folder

    def chosen(self, names: tuple[str, ...]) -> Outputs:
        """These outputs for a command that takes the output options ``names``."""
        return replace(
            self, kinds=tuple(k for k in ("csv", "json", "positions") if k in names), folder="folder" in names
        )

    def running(self, request):
        """``request`` as these outputs run it: a progress bar unless --quiet, and with --html the top tokens its
        page shows on hover (--topk, or 5 when only --html is given)."""
        if not hasattr(request, "top_k"):
            return replace(request, progress=not self.quiet)
        top_k = request.top_k or (5 if self.html is not None else 0)
        return replace(request, progress=not self.quiet, top_k=top_k)

    def __post_init__(self) -> None:
        """The paths named, checked before anything runs: a file option that names a folder, a folder that is a
        file (one line, exit 2)."""
        from infoeval.output.results import check_file_option, check_folder_option

        for name in ("csv", "json", "positions", "plot", "html"):
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


def run_folder(command: str, model: str, source: str, run_name: str | None) -> Path:
    """results/<run-name>, the name given or made of the command, the model's name, the text's source and a stamp."""
    from infoeval.input.prepare import default_run_name
    from infoeval.input.settings import ModelSettings

    return Path("results") / (run_name or default_run_name(command, ModelSettings(model=model), source))
