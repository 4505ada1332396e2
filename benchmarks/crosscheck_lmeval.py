"""Cross-check `infoeval --protocol lm-eval` against lm-evaluation-harness itself; prints JSON. Not run in CI.

    python benchmarks/crosscheck_lmeval.py                        # python-docs, ctx 512
    python benchmarks/crosscheck_lmeval.py --ctx 512 2048
    python benchmarks/crosscheck_lmeval.py --text wikitext-2 --ctx 2048

1. A virtual environment of its own (default ~/.cache/infoeval-crosscheck/venv) with lm-eval pinned and torch,
   transformers, tokenizers, accelerate and safetensors at this environment's versions (pip; made once).
2. The model: the built-in SmolLM2-135M as a Hugging Face folder (infoeval's safetensors conversion of the GGUF,
   ``model_files.gguf_cache_dir``), float32; lm-eval and infoeval load the very same files.
3. The text as an lm-eval task of local files (``--include_path``; no hub): ``python-docs`` is one document
   (a JSONL line, ``doc_to_target: text``, lm-eval's default word and byte counts); ``wikitext-2`` is the
   test file split into articles by ``infoeval.input.documents.wikitext_articles`` (the ``wikitext_document_level``
   split; the hub is not reachable here) with lm-eval's own ``preprocess_wikitext.py`` (detokenizer, counts).
4. ``lm_eval --model hf --model_args pretrained=<folder>,max_length=<ctx>,dtype=float32 --device cpu`` and
   ``infoeval compress-bits --protocol lm-eval --documents …``; both figures side by side, their relative
   differences, and whether lm-eval's printed digits (``%.4f``) agree.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from importlib import metadata
from pathlib import Path

from _record import add_save, emit  # benchmarks/_record.py

LM_EVAL = "0.4.13"
PINNED = ("torch", "transformers", "tokenizers", "accelerate", "safetensors")
DEFAULT_VENV = Path.home() / ".cache" / "infoeval-crosscheck" / "venv"
FIGURES = ("word_perplexity", "byte_perplexity", "bits_per_byte")
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
TASK = "infoeval_crosscheck"


def requirements() -> list[str]:
    return [f"lm-eval=={LM_EVAL}", *(f"{p}=={metadata.version(p).split('+')[0]}" for p in PINNED)]


def ensure_venv(path: Path) -> Path:
    """The environment's python, with lm-eval and the pinned packages installed (pip runs only when needed)."""
    py = path / "bin" / "python"
    if not py.exists():
        venv.create(path, with_pip=True)
    want = requirements()
    probe = (
        "import importlib.metadata as m, sys; print(all(m.version(r.split('==')[0]).split('+')[0] == "
        "r.split('==')[1] for r in sys.argv[1:]))"
    )
    have = subprocess.run([str(py), "-c", probe, *want], capture_output=True, text=True)
    if have.stdout.strip() != "True":
        subprocess.run([str(py), "-m", "pip", "install", "-q", *want], check=True)
    return py


def model_folder() -> Path:
    """The built-in SmolLM2 as a Hugging Face folder (converted once, cached)."""
    from infoeval.models.files import BUILTIN, builtin_gguf, gguf_cache_dir, sha256_file

    gguf = builtin_gguf(next(iter(BUILTIN)))
    return gguf_cache_dir(gguf, sha256_file(gguf))


def write_task(
    folder: Path, text: str, venv_py: Path, data_dir: str | None, max_chars: int | None = None
) -> tuple[Path, list[str]]:
    """The task YAML and its JSONL in ``folder``; returns the JSONL and infoeval's text options. ``max_chars``
    keeps the first characters of python-docs only (a shorter document, for a quicker check)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "docs.jsonl"
    metrics = "metric_list:\n" + "".join(f"  - metric: {m}\n" for m in FIGURES)
    if text == "python-docs":
        from infoeval.input.text import python_docs

        data.write_text(json.dumps({"text": python_docs()[:max_chars]}, ensure_ascii=False) + "\n", encoding="utf-8")
        target = "doc_to_target: text\n"
        options = ["--documents", str(data)]
    else:
        from infoeval.input.documents import wikitext_articles
        from infoeval.input.text import load_text

        pages = wikitext_articles(load_text(None, text, Path(data_dir) if data_dir else None).text)
        data.write_text("".join(json.dumps({"page": p}, ensure_ascii=False) + "\n" for p in pages), encoding="utf-8")
        src = subprocess.run(
            [str(venv_py), "-c", "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        shutil.copy(Path(src) / "tasks" / "wikitext" / "preprocess_wikitext.py", folder / "preprocess_wikitext.py")
        target = (
            "doc_to_target: !function preprocess_wikitext.wikitext_detokenizer\n"
            "process_results: !function preprocess_wikitext.process_results\n"
        )
        options = ["--dataset", text, "--documents", "articles"] + (["--data-dir", data_dir] if data_dir else [])
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
        f"output_type: loglikelihood_rolling\ndoc_to_text: ''\n{target}{metrics}",
        encoding="utf-8",
    )
    return data, options


def check_kept(work: Path, data: Path) -> None:
    """A kept folder's finished runs belong to one text: the sha256 of its JSONL is recorded there on first use and
    must match on every later use (another --text or --max-chars needs another --keep folder)."""
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    mark = work / "docs.sha256"
    if mark.is_file() and mark.read_text().strip() != digest:
        sys.exit(
            f"--keep {work}: its finished runs are of another text (docs.jsonl sha256 {mark.read_text().strip()[:12]}, "
            f"now {digest[:12]}); use another --keep folder"
        )
    mark.write_text(digest + "\n")


def run_lm_eval(venv_py: Path, folder: Path, task_dir: Path, ctx: int, out: Path) -> dict:
    lm_eval = venv_py.parent / "lm_eval"
    cmd = [
        str(lm_eval),
        "--model",
        "hf",
        "--model_args",
        f"pretrained={folder},max_length={ctx},dtype=float32",
        "--device",
        "cpu",
        "--batch_size",
        "1",
        "--tasks",
        TASK,
        "--include_path",
        str(task_dir),
        "--output_path",
        str(out),
        "--log_samples",
    ]
    t0 = time.perf_counter()
    if not glob.glob(str(out / "**" / "results_*.json"), recursive=True):  # a kept folder's finished run is reused
        subprocess.run(cmd, check=True, env={**os.environ, **OFFLINE}, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    results = json.loads(Path(sorted(glob.glob(str(out / "**" / "results_*.json"), recursive=True))[-1]).read_text())
    res = results["results"][TASK]
    samples = [
        json.loads(line)
        for f in glob.glob(str(out / "**" / f"samples_{TASK}_*.jsonl"), recursive=True)
        for line in Path(f).read_text().splitlines()
        if line.strip()
    ]
    ll = sum(s["word_perplexity"][0] for s in samples)
    return {
        "loglikelihood": ll,
        "documents": len(samples),
        "words": sum(s["word_perplexity"][1] for s in samples),
        "bytes": sum(s["byte_perplexity"][1] for s in samples),
        **{m: res[f"{m},none"] for m in FIGURES},
        "seconds": round(seconds, 1),
        "version": results.get("lm_eval_version") or LM_EVAL,
    }


def run_infoeval(options: list[str], ctx: int, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "infoeval",
        "compress-bits",
        "--protocol",
        "lm-eval",
        "--ctx",
        str(ctx),
        "--max-tokens",
        "all",
        "--json",
        str(out),
        "-q",
        *options,
    ]
    t0 = time.perf_counter()
    if not out.is_file():  # a kept folder's finished run is reused
        subprocess.run(cmd, check=True, env={**os.environ, **OFFLINE}, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    data = json.loads(out.read_text())
    figures = data["protocol_metrics"]["figures"]["reference"]
    return {
        **figures,
        "tokens": data["reference"]["tokens"],
        "windows": data["provenance"]["protocol"]["windows"],
        "seconds": round(seconds, 1),
    }


def compare(ours: dict, theirs: dict) -> dict:
    keys = ("loglikelihood", "words", "bytes", *FIGURES)
    rel = {k: abs(ours[k] - theirs[k]) / abs(theirs[k]) if theirs[k] else abs(ours[k]) for k in keys}
    printed = {
        m: {
            "infoeval": f"{ours[m]:.4f}",
            "lm_eval": f"{theirs[m]:.4f}",
            "equal": f"{ours[m]:.4f}" == f"{theirs[m]:.4f}",
        }
        for m in FIGURES
    }
    return {
        "relative_difference": rel,
        "printed": printed,
        "loglikelihood_within_1e-5": rel["loglikelihood"] <= 1e-5,
        "all_printed_equal": all(p["equal"] for p in printed.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", type=int, nargs="+", default=[512])
    ap.add_argument("--text", default="python-docs", choices=["python-docs", "wikitext-2", "wikitext-2-valid"])
    ap.add_argument("--data-dir", default=None, help="folder holding wikitext-2-raw/ (else infoeval's search path)")
    ap.add_argument("--max-chars", type=int, default=None, help="python-docs: only its first N characters (quicker)")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the task, lm-eval's and infoeval's outputs here (finished runs of the same text found there "
        "are reused)",
    )
    add_save(ap)
    args = ap.parse_args()
    py = ensure_venv(args.venv)
    folder = model_folder()
    work = Path(tempfile.mkdtemp(prefix="infoeval-crosscheck-")) if args.keep is None else args.keep
    data, options = write_task(work / "task", args.text, py, args.data_dir, args.max_chars)
    check_kept(work, data)
    runs = []
    for ctx in args.ctx:
        theirs = run_lm_eval(py, folder, work / "task", ctx, work / f"lm_eval-{ctx}")
        ours = run_infoeval(options, ctx, work / f"infoeval-{ctx}.json")
        runs.append({"ctx": ctx, "lm_eval": theirs, "infoeval": ours, **compare(ours, theirs)})
    emit(
        __file__,
        {
            "text": args.text,
            "max_chars": args.max_chars,
            "model": str(folder),
            "requirements": requirements(),
            "runs": runs,
        },
        args.save,
        args=args,
        indent=1,
    )
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
