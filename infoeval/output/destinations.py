"""Where a run's files go: the output options, declared once (``Outputs``: --csv --json --positions --plot --html
--out-dir --run-name -q; a command takes those it writes), checked before the long run, and the files they name."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from infoeval.input.fields import option

RUN_OUTPUTS = ("csv", "json", "positions", "plot", "folder", "quiet")  # what a command that scores a text writes
LLAMACPP_TABLE = "llama.cpp"  # --table llama.cpp: llama-perplexity --kl-divergence's block (output/llamacpp_table.py)
GATE_TABLES = ("default", LLAMACPP_TABLE)  # the layouts of every command with --table
TABLES = (*GATE_TABLES, "confidence")  # quantize-compare's: also KL by confidence
FOLDER = ("out_dir", "run_name")  # "folder" among a command's outputs: these two (the default run folder)


def output_keywords(names: tuple[str, ...]) -> tuple[str, ...]:
    """The output options a command takes: ``names`` with "folder" standing for --out-dir and --run-name."""
    return tuple(k for n in names for k in (FOLDER if n == "folder" else (n,)))


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
        from infoeval.output.emit import check_plot
        from infoeval.output.results import check_frame_path

        check_plot(self.plot)
        for path in (self.csv, self.positions):
            check_frame_path(path)

    def reporter(self):
        """The progress bar on stderr (none with -q)."""
        from infoeval.output.tables import RichReporter

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


def run_folder(command: str, model: str, source: str, run_name: str | None) -> Path:
    """results/<run-name>, the name given or made of the command, the model's name, the text's source and a stamp."""
    from infoeval.input.prepare import default_run_name
    from infoeval.input.settings import ModelSettings

    return Path("results") / (run_name or default_run_name(command, ModelSettings(model=model), source))


def table_option(allowed: tuple[str, ...], help: str):
    """--table LAYOUT: how the results are printed (one of ``allowed``)."""
    from infoeval.input.fields import one_of

    return option("default", flags=("--table",), help=help, parse=one_of("table", allowed), panel="Output")
