"""The gate as a GitHub Action (``action.yml`` at the repository root): the steps its shell runs,
``python -m infoeval.gating.github STEP``, each reading the action's inputs from ``INPUT_*`` variables:

    prepare  the inputs checked (a comment asked for without a token fails here, before anything runs); the
             reference: a file as it is, or a model, then the key ``infoeval reference --cache-key`` prints for
             the build's own arguments and the path ``actions/cache`` restores it to (outputs build, key, path)
    build    ``infoeval reference MODEL --out PATH`` with the same arguments (on a cache miss)
    gate     ``infoeval gate``: its JUnit, Markdown and JSON in the output folder; on a verdict (exit 0 or 1) the
             Markdown appended to $GITHUB_STEP_SUMMARY (cut to GitHub's 1 MiB with a line saying so) and the outputs
             passed, verdicts, summary, junit set; on an error (exit 2 or 3) its one line as an ``::error::``
             annotation, no summary, the step failed with the gate's exit code
    comment  one pull-request comment, created or updated in place (found by a hidden tag: one per candidate), cut
             to 65,536 characters; skipped with a notice outside a pull request or where the token cannot write
             (a fork's pull request)

A failed gate does not fail the ``gate`` step (so that the comment is written); the action's last step does.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

SUMMARY_LIMIT = 1024 * 1024  # bytes GitHub keeps of one step's summary
COMMENT_LIMIT = 65_536  # characters of an issue comment
TAG = "<!-- infoeval-gate: {} -->"
CACHE_FOLDER = ".infoeval-cache"


def _input(name: str, default: str = "") -> str:
    return os.environ.get(f"INPUT_{name.upper().replace('-', '_')}", default).strip()


def _escape(text: str) -> str:
    """A workflow command's message: %, CR and LF escaped as the runner reads them."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def annotate(kind: str, message: str) -> None:
    """``::error::``, ``::warning::`` or ``::notice::`` on stdout, where the runner reads workflow commands."""
    print(f"::{kind} title=infoeval::{_escape(message)}", flush=True)


def set_outputs(**values: str) -> None:
    """Step outputs appended to $GITHUB_OUTPUT (each as a here-document: any value is safe)."""
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as f:
        for name, value in values.items():
            delimiter = f"EOF_{uuid.uuid4().hex}"
            f.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def cut_to(text: str, limit: int, measure, note: str) -> str:
    """``text`` whole when ``measure(text) ≤ limit``, else its first lines that fit with ``note`` after them."""
    if measure(text) <= limit:
        return text
    room, kept = limit - measure(note) - 2, []
    used = 0
    for line in text.splitlines(keepends=True):
        if used + measure(line) > room:
            break
        kept.append(line)
        used += measure(line)
    return "".join(kept).rstrip("\n") + "\n\n" + note


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def summary_text(markdown: str, whole: Path, used: int = 0) -> str:
    """The Markdown for the step summary, within what GitHub keeps (``used``: bytes already in this step's file)."""
    note = f"> Cut to fit GitHub's 1 MiB step summary; the whole summary is `{whole}`.\n"
    return cut_to(markdown, SUMMARY_LIMIT - used, _utf8, note)


def comment_body(markdown: str, tag: str, whole: Path) -> str:
    """The comment: its hidden tag, then the Markdown within a comment's 65,536 characters."""
    head = TAG.format(tag) + "\n"
    note = f"> Cut to fit a comment's 65,536 characters; the whole summary is `{whole}` (the job's summary).\n"
    return head + cut_to(markdown, COMMENT_LIMIT - len(head), len, note)


def run_infoeval(args: list[str], ok: tuple[int, ...] = (0, 1)) -> tuple[int, str]:
    """``infoeval ARGS`` in this Python: (its exit code, its stdout); its stderr passed through, its last line an
    ``::error::`` when the code is not one of ``ok`` (0, 1: a verdict)."""
    print("infoeval " + " ".join(shlex.quote(a) for a in args), flush=True)
    done = subprocess.run([sys.executable, "-m", "infoeval", *args], capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode not in ok:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        annotate("error", lines[-1] if lines else f"infoeval {args[0]} exited with {done.returncode}")
    return done.returncode, done.stdout


def reference_args(model: str, out: str) -> list[str]:
    """``infoeval reference``'s arguments from the action's inputs (the key's and the build's, the same)."""
    args = ["reference", model, "--out", out]
    for name in ("text", "dataset", "max-tokens"):
        if _input(name):
            args += [f"--{name}", _input(name)]
    return args + shlex.split(_input("reference-args"))


def prepare() -> int:
    if _input("comment") == "true" and not _input("github-token"):
        annotate(
            "error", "comment: true needs a token that can write comments (github-token, e.g. ${{ github.token }})"
        )
        return 2
    reference = _input("reference")
    if not reference:
        annotate("error", "the input reference is empty: give a reference file or a model to build one from")
        return 2
    if reference.endswith(".safetensors"):
        if not Path(reference).is_file():
            annotate("error", f"reference file '{reference}' does not exist")
            return 2
        set_outputs(build="false", key="", path=reference)
        return 0
    code, out = run_infoeval([*reference_args(reference, "unused"), "--cache-key", "-q"], ok=(0,))
    if code != 0:
        return code
    key = out.strip().splitlines()[-1]
    set_outputs(build="true", key=key, path=f"{CACHE_FOLDER}/{key}.safetensors")
    print(f"reference cache key: {key}")
    return 0


def build() -> int:
    return run_infoeval(reference_args(_input("reference"), os.environ["REFERENCE_PATH"]))[0]


def gate() -> int:
    folder = Path(_input("output-dir", "infoeval-gate"))
    folder.mkdir(parents=True, exist_ok=True)
    files = {kind: folder / f"gate.{ext}" for kind, ext in (("junit", "xml"), ("summary", "md"), ("verdicts", "json"))}
    for path in files.values():
        path.unlink(missing_ok=True)  # a verdict is read from this run's files alone
    args = [
        "gate",
        *([_input("candidate")] if _input("candidate") else []),
        "--reference",
        os.environ["REFERENCE_PATH"],
    ]
    args += ["--limits", _input("limits", "default")] if _input("limits", "default") else []
    args += ["--sequential"] if _input("sequential") == "true" else []
    args += ["--baseline", _input("baseline")] if _input("baseline") else []
    args += ["--junit", str(files["junit"]), "--markdown", str(files["summary"]), "--json", str(files["verdicts"])]
    code = run_infoeval([*args, "-q", *shlex.split(_input("extra-args"))])[0]
    if code not in (0, 1) or not files["summary"].is_file():
        return code or 3
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        used = Path(summary).stat().st_size if Path(summary).is_file() else 0
        text = summary_text(files["summary"].read_text(encoding="utf-8"), files["summary"], used)
        with open(summary, "a", encoding="utf-8") as f:  # one write of the whole (cut) summary
            f.write(text)
    set_outputs(passed="true" if code == 0 else "false", **{k: str(p) for k, p in files.items()})
    return 0


def _request(url: str, token: str, method: str = "GET", body: dict | None = None):
    req = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read() or b"null")


def _pull_request() -> tuple[dict | None, str]:
    """The event's pull request, or None with why no comment is written."""
    path = os.environ.get("GITHUB_EVENT_PATH")
    event = json.loads(Path(path).read_text(encoding="utf-8")) if path and Path(path).is_file() else {}
    pr = event.get("pull_request")
    if pr is None:
        return None, f"no pull request in this {os.environ.get('GITHUB_EVENT_NAME', 'event')}: no comment written"
    head, base = (pr.get(side, {}).get("repo") or {} for side in ("head", "base"))
    if head.get("full_name") and head.get("full_name") != base.get("full_name"):
        return None, "a pull request from a fork: its token cannot write comments; the job summary has the verdicts"
    return pr, ""


def upsert_comment(api: str, repo: str, number: int, token: str, body: str, tag: str) -> str:
    """Update the comment that starts with ``tag``'s marker, or create one; 'updated' or 'created'."""
    marker, page = TAG.format(tag), 1
    while True:
        comments = _request(f"{api}/repos/{repo}/issues/{number}/comments?per_page=100&page={page}", token)
        for c in comments:
            if (c.get("body") or "").startswith(marker):
                _request(f"{api}/repos/{repo}/issues/comments/{c['id']}", token, "PATCH", {"body": body})
                return "updated"
        if len(comments) < 100:
            break
        page += 1
    _request(f"{api}/repos/{repo}/issues/{number}/comments", token, "POST", {"body": body})
    return "created"


def comment() -> int:
    pr, why = _pull_request()
    if pr is None:
        annotate("notice", why)
        return 0
    summary = Path(os.environ["SUMMARY_PATH"])
    tag = _input("comment-tag") or _input("candidate") or "reference model"
    body = comment_body(summary.read_text(encoding="utf-8"), tag, summary)
    api, repo = os.environ.get("GITHUB_API_URL", "https://api.github.com"), os.environ["GITHUB_REPOSITORY"]
    try:
        done = upsert_comment(api, repo, int(pr["number"]), _input("github-token"), body, tag)
    except urllib.error.HTTPError as e:
        if e.code in (401, 403, 404):
            annotate(
                "notice", f"the token cannot write comments here (HTTP {e.code}); the job summary has the verdicts"
            )
            return 0
        annotate("warning", f"the comment could not be written: HTTP {e.code} {e.reason}")
        return 0
    print(f"pull request comment {done} ({len(body):,} characters)")
    return 0


STEPS = {"prepare": prepare, "build": build, "gate": gate, "comment": comment}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in STEPS:
        print(f"usage: python -m infoeval.gating.github {{{','.join(STEPS)}}}", file=sys.stderr)
        return 2
    return STEPS[argv[0]]()


if __name__ == "__main__":
    sys.exit(main())
