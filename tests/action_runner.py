"""action.yml's steps run here as GitHub's runner runs a composite action's: each step's ``if`` and ``${{ }}``
expressions evaluated (inputs, steps' outputs, github, always()), its ``run`` given to ``bash --noprofile --norc -eo
pipefail`` with its ``env`` and fresh $GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY files, its outputs read back; the steps
after a failed one skipped. ``actions/setup-python`` is skipped (this Python runs the steps), ``actions/cache``'s
restore and save are a folder, and the step with id ``install`` is skipped (infoeval is installed here already)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TOKEN = re.compile(r"\s*('(?:[^']|'')*'|[A-Za-z_][\w.-]*\(\)|[A-Za-z_][\w.-]*|==|!=|&&|\|\||!|\(|\))")
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class Run:
    """What a run of the action did: each step's outcome and outputs, what it printed, the action's outputs."""

    steps: dict = field(default_factory=dict)  # id or name → {"outcome", "outputs", "log", "summary"}
    outputs: dict = field(default_factory=dict)
    failed: str | None = None  # the step that failed, if one did

    @property
    def log(self) -> str:
        return "".join(s["log"] for s in self.steps.values())

    @property
    def summary(self) -> str:
        return "".join(s["summary"] for s in self.steps.values())


def _string(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def evaluate(expression: str, context: dict):
    """An expression of the forms action.yml uses: context names, 'strings', == != && || ! ( ), always()…"""
    python, at = [], 0
    while at < len(expression.rstrip()):
        m = TOKEN.match(expression, at)
        if m is None:
            raise ValueError(f"cannot read the expression {expression!r} at {at}")
        tok, at = m.group(1), m.end()
        if tok.startswith("'"):
            python.append(repr(tok[1:-1].replace("''", "'")))
        elif tok.endswith("()"):
            python.append({"always()": "True", "success()": "True", "failure()": "False"}[tok])
        elif tok in ("==", "!=", "(", ")"):
            python.append(tok)
        else:
            python.append({"&&": "and", "||": "or", "!": "not"}.get(tok) or repr(_lookup(tok, context)))
    return eval(" ".join(python), {"__builtins__": {}})  # noqa: S307  (tokens checked above)


def _lookup(name: str, context: dict) -> str:
    parts = name.split(".")
    if parts[0] == "steps":
        return _string(context["steps"].get(parts[1], {}).get("outputs", {}).get(parts[3]))
    return _string(context.get(parts[0], {}).get(".".join(parts[1:])))


def substitute(text, context: dict) -> str:
    return EXPRESSION.sub(lambda m: _string(evaluate(m.group(1), context)), _string(text))


def read_outputs(path: Path) -> dict:
    """$GITHUB_OUTPUT's lines: name=value, or name<<DELIMITER … DELIMITER."""
    out, lines = {}, path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    i = 0
    while i < len(lines):
        if "<<" in lines[i] and "=" not in lines[i].split("<<")[0]:
            name, delimiter = lines[i].split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name], i = "\n".join(lines[i + 1 : end]), end + 1
        else:
            name, _, value = lines[i].partition("=")
            out[name], i = value, i + 1
    return out


def _cache(step: dict, context: dict, cache: Path, workspace: Path) -> dict:
    """actions/cache/restore (a hit copies the stored file to its path) or actions/cache/save (stores it)."""
    path, key = substitute(step["with"]["path"], context), substitute(step["with"]["key"], context)
    stored = cache / key
    if step["uses"].startswith("actions/cache/save"):
        cache.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(workspace / path, stored)
        return {}
    if stored.is_file():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stored, workspace / path)
        return {"cache-hit": "true"}
    return {"cache-hit": "false"}


def _run_step(step: dict, context: dict, env: dict, workspace: Path, scratch: Path) -> dict:
    output, summary = scratch / "output", scratch / "summary"
    for f in (output, summary):
        f.write_text("")
    step_env = {**env, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
    step_env |= {k: substitute(v, context) for k, v in (step.get("env") or {}).items()}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=workspace,
        env=step_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    outcome = "success" if done.returncode == 0 else "failure"
    return {"outcome": outcome, "code": done.returncode, "outputs": read_outputs(output), "log": done.stdout,
            "summary": summary.read_text(encoding="utf-8")}  # fmt: skip


def run_action(inputs: dict, workspace: Path, cache: Path, env: dict | None = None, token: str = "") -> Run:
    """The action at the repository root run with ``inputs`` in ``workspace`` (``cache``: actions/cache's store;
    ``env``: the runner's variables, GITHUB_EVENT_PATH…; ``token``: github.token)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    github = {"action_path": str(ROOT), "token": token}
    context = {"github": github, "steps": {}, "inputs": {}}
    context["inputs"] = {k: substitute(spec.get("default", ""), context) for k, spec in action["inputs"].items()}
    context["inputs"] |= {k: _string(v) for k, v in inputs.items()}
    base = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **(env or {})}
    run, scratch = Run(), workspace / ".runner"
    scratch.mkdir(parents=True, exist_ok=True)
    for step in action["runs"]["steps"]:
        name = step.get("id") or step["name"]
        if run.failed or step.get("id") == "install" or ("if" in step and not evaluate(step["if"], context)):
            run.steps[name] = {"outcome": "skipped", "outputs": {}, "log": "", "summary": ""}
        elif step.get("uses", "").startswith("actions/setup-python"):
            run.steps[name] = {"outcome": "skipped", "outputs": {}, "log": "", "summary": ""}
        elif step.get("uses", "").startswith("actions/cache"):
            outputs = _cache(step, context, cache, workspace)
            run.steps[name] = {"outcome": "success", "outputs": outputs, "log": "", "summary": ""}
        else:
            run.steps[name] = _run_step(step, context, base, workspace, scratch)
            if run.steps[name]["outcome"] == "failure":
                run.failed = name
        context["steps"][name] = run.steps[name]
    run.outputs = {k: substitute(spec["value"], context) for k, spec in action["outputs"].items()}
    return run


def event_file(folder: Path, number: int = 7, head: str = "org/repo", base: str = "org/repo") -> Path:
    """A pull_request event's payload (the fields the comment step reads)."""
    path = folder / "event.json"
    pr = {"number": number, "head": {"repo": {"full_name": head}}, "base": {"repo": {"full_name": base}}}
    path.write_text(json.dumps({"pull_request": pr}), encoding="utf-8")
    return path
