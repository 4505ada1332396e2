"""Output paths checked before a run: a file option naming a folder, a folder option naming a file, a path under a
file are one usage line (exit 2) before anything is loaded, not a failed rename after the work; and the atomic
writer says the same in words."""

from __future__ import annotations

import pytest

from infoeval.cli import main
from infoeval.errors import UsageError
from infoeval.output.destinations import Outputs
from infoeval.output.results import atomic_write_bytes, check_file_option, check_folder_option


def test_file_and_folder_options(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    check_file_option(None, "--json")
    check_file_option(tmp_path / "new.json", "--json")  # a new file in a folder that exists
    check_file_option(tmp_path / "new" / "deeper" / "r.json", "--json")  # folders made on writing
    with pytest.raises(UsageError, match=r"^--json .* is a folder; give the path of a file to write$"):
        check_file_option(tmp_path, "--json")
    with pytest.raises(UsageError, match=r"^--csv .*f.txt/s.csv cannot be written: .*f.txt is a file, not a folder$"):
        check_file_option(tmp_path / "f.txt" / "s.csv", "--csv")
    check_folder_option(tmp_path, "--out-dir")
    check_folder_option(tmp_path / "new", "--out-dir")
    with pytest.raises(UsageError, match=r"^--out-dir .*f.txt is a file; give a folder$"):
        check_folder_option(tmp_path / "f.txt", "--out-dir")


def test_the_atomic_writer_refuses_a_folder_in_words(tmp_path):
    with pytest.raises(UsageError, match="is a folder"):
        atomic_write_bytes(tmp_path, b"x")
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_outputs_and_page_options_check_on_construction(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(UsageError, match="^--json"):
        Outputs(json=tmp_path)
    with pytest.raises(UsageError, match="^--positions"):
        Outputs(positions=tmp_path)
    with pytest.raises(UsageError, match="^--out-dir"):
        Outputs(out_dir=tmp_path / "f.txt")
    with pytest.raises(UsageError, match="^--html"):
        Outputs(html=tmp_path)
    assert Outputs(json=tmp_path / "r.json").json == tmp_path / "r.json"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["quantize-compare", "--json", "{dir}"], "--json {dir} is a folder"),
        (["compress-bits", "--out-dir", "{file}"], "--out-dir {file} is a file; give a folder"),
        (["quantize-compare", "--html", "{dir}"], "--html {dir} is a folder"),
        (["gate", "--junit", "{dir}"], "--junit {dir} is a folder"),
        (["reference", "--out", "{dir}"], "--out {dir} is a folder"),
        (["quantize", "--out", "{file}", "--force"], "--out {file} is a file; give a folder"),
        (["report", "{dir}", "--out", "{dir}"], "--out {dir} is a folder"),
        (["compress", "{file}", "-o", "{dir}"], "-o {dir} is a folder"),
    ],
)
def test_the_cli_refuses_them_before_any_work(argv, words, tmp_path, capsys, monkeypatch):
    """No model named: each command would load the default one, so an exit 2 here came before any loading."""
    import transformers

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the output paths were checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    (tmp_path / "f.txt").write_text("x")
    fill = {"dir": str(tmp_path), "file": str(tmp_path / "f.txt")}
    assert main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("infoeval: error: " + words.format(**fill)), err
