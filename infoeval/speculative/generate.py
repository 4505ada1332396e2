"""spec-decode: speculative sampling against plain sampling from the target, timed on the same prompt, with the
same number of new tokens and the same seed handling (each loop gets a fresh generator seeded with --seed); and
optionally Theorem 1 checked by Monte Carlo on the prompt (``verify.py``)."""

from __future__ import annotations

import hashlib
import time

import torch

from infoeval.errors import UsageError, spell
from infoeval.input.prepare import Reporter, progress
from infoeval.input.provenance import provenance
from infoeval.input.settings import ModelSettings
from infoeval.models import load_model, resolve_device, resolve_dtype
from infoeval.speculative.decode import Generation, plain_sample, speculative_sample
from infoeval.speculative.drafts import DraftSettings, build_draft
from infoeval.speculative.results import DecodeResult
from infoeval.speculative.theory import break_even_alpha, expected_tokens
from infoeval.speculative.verify import theorem1_check


def check_options(gamma: int, max_new: int, temperature: float, repeats: int, verify: int) -> None:
    if gamma < 1:
        raise UsageError(f"{spell('gamma')} {gamma} is not allowed; the draft proposes at least 1 token per round")
    if max_new < 1:
        raise UsageError(f"{spell('max_new_tokens')} {max_new} is not allowed; give at least 1")
    if not temperature > 0:
        raise UsageError(f"{spell('temperature')} {temperature} is not allowed; sampling needs T > 0")
    if repeats < 1:
        raise UsageError(f"{spell('repeats')} {repeats} is not allowed; give at least 1")
    if verify < 0 or 0 < verify < 100:
        raise UsageError(f"{spell('verify')} {verify} is not allowed; give 0 (no check) or at least 100 samples")


def _gen_dict(g: Generation, walls: list[float], tokenizer, n_prompt: int) -> dict:
    wall = min(walls)
    return {
        "new_tokens": g.new_tokens,
        "wall_s": wall,
        "wall_s_all": walls,
        "tokens_per_s": g.new_tokens / wall if wall > 0 else float("nan"),
        "target_calls": g.target_calls,
        "tokens_per_target_call": g.new_tokens / g.target_calls,
        "target_s": g.target_s,
        "draft_calls": g.draft_calls,
        "draft_s": g.draft_s,
        "proposed": g.proposed,
        "accepted": g.accepted,
        "acceptance": g.acceptance if g.proposed else None,
        "verified": g.verified,
        "alpha": g.alpha if g.verified else None,
        "text": tokenizer.decode(g.tokens[n_prompt:]),
    }


def _timed_runs(target, draft, prompt_ids, gamma, max_new, temperature, seed, repeats, reporter: Reporter):
    """A warm-up of both loops, then ``repeats`` alternating timed runs of each; returns the last generations and
    every run's wall time."""
    reporter.stage("warming up")
    width = draft.width
    plain_sample(target, prompt_ids, min(4, max_new), temperature, torch.Generator().manual_seed(seed + 1), width)
    speculative_sample(
        target, draft, prompt_ids, gamma, min(4, max_new), temperature, torch.Generator().manual_seed(seed + 1)
    )
    walls = {"plain": [], "speculative": []}
    with progress(reporter, 2 * repeats, f"plain and speculative sampling, {max_new} tokens × {repeats}") as bar:
        for _ in range(repeats):  # alternate, so that a slower or busier moment hits both alike
            plain = plain_sample(target, prompt_ids, max_new, temperature, torch.Generator().manual_seed(seed), width)
            walls["plain"].append(plain.wall_s)
            bar.step()
            spec = speculative_sample(
                target, draft, prompt_ids, gamma, max_new, temperature, torch.Generator().manual_seed(seed)
            )
            walls["speculative"].append(spec.wall_s)
            bar.step()
    return plain, spec, walls


def _load(model_settings: ModelSettings, draft_settings: DraftSettings, prompt: str, reporter: Reporter):
    """The target and its draft, loaded and built (timed together as load_s), and the prompt's token ids on their
    device; returns (loaded target, draft, prompt ids, timings)."""
    device = resolve_device(model_settings.device)
    dtype = resolve_dtype(model_settings.dtype, device)
    reporter.stage(f"loading {model_settings.model}")
    t0 = time.perf_counter()
    loaded = load_model(model_settings.model, device, dtype, model_settings.device_map)
    draft = build_draft(loaded, draft_settings, device, dtype, model_settings.device_map, reporter.note)
    timings = {"load_s": time.perf_counter() - t0}
    ids = loaded.tokenizer(prompt).input_ids
    if not ids:
        raise UsageError(f"{spell('prompt')} is empty after tokenization; give some text")
    return loaded, draft, torch.tensor(ids, device=device), timings


def _model_of_speedup(plain: Generation, spec: Generation, gamma: int) -> dict:
    """The speed-up predicted from the measured steps: α, the expected tokens per target call, the draft step's and
    the verifying call's costs relative to one target step, both predictions and the break-even α."""
    alpha = spec.alpha
    t_target = plain.target_s / plain.target_calls  # one cached 1-token target step
    t_draft = spec.draft_s / spec.draft_calls if spec.draft_calls else float("nan")
    t_verify = spec.target_s / spec.target_calls  # one target call over γ + 1 tokens
    cost, verify_cost = t_draft / t_target, t_verify / t_target
    e = expected_tokens(alpha, gamma)
    return {
        "alpha": alpha,
        "predicted_tokens_per_call": e,
        "target_step_s": t_target,
        "draft_step_s": t_draft,
        "cost_ratio": cost,
        "verify_call_s": t_verify,
        "verify_cost": verify_cost,
        "predicted_speedup_papers": e / (gamma * cost + 1.0),
        "predicted_speedup": e / (gamma * cost + verify_cost),
        "break_even_alpha": break_even_alpha(gamma, cost, verify_cost),
    }


def spec_decode(
    model_settings: ModelSettings,
    draft_settings: DraftSettings,
    prompt: str,
    gamma: int,
    max_new: int,
    temperature: float,
    seed: int,
    repeats: int = 1,
    verify: int = 0,
    reporter: Reporter | None = None,
) -> tuple[DecodeResult, Generation]:
    reporter = reporter or Reporter()
    check_options(gamma, max_new, temperature, repeats, verify)
    draft_settings.check()
    loaded, draft, prompt_ids, timings = _load(model_settings, draft_settings, prompt, reporter)
    target = loaded.model

    plain, spec, walls = _timed_runs(target, draft, prompt_ids, gamma, max_new, temperature, seed, repeats, reporter)
    n_prompt = len(prompt_ids)
    res_plain = _gen_dict(plain, walls["plain"], loaded.tokenizer, n_prompt)
    res_spec = _gen_dict(spec, walls["speculative"], loaded.tokenizer, n_prompt)
    verified = None
    if verify:
        reporter.stage(f"Theorem 1: {verify} samples per sampler")
        t0 = time.perf_counter()
        verified = theorem1_check(
            target, draft, prompt_ids, temperature, verify, (1, gamma) if gamma > 1 else (1,), seed
        )
        timings["verify_s"] = time.perf_counter() - t0
        reporter.stop()
    prompt_info = {"text": prompt, "tokens": n_prompt, "sha256": hashlib.sha256(prompt.encode("utf-8")).hexdigest()}
    result = DecodeResult(
        provenance("spec-decode", model=loaded.info, draft=draft.info, prompt=prompt_info),
        timings,
        settings={
            "gamma": gamma,
            "max_new_tokens": max_new,
            "temperature": temperature,
            "seed": seed,
            "repeats": repeats,
            "eos": "ignored: both loops generate exactly max_new_tokens",
        },
        plain=res_plain,
        speculative=res_spec,
        speedup=res_plain["wall_s"] / res_spec["wall_s"],
        model_of_speedup=_model_of_speedup(plain, spec, gamma),
        verify=verified,
    )
    return result, spec


def rounds_frame(spec: Generation):
    """One row per speculative round: proposed, accepted and emitted tokens."""
    import pandas as pd

    frame = pd.DataFrame(spec.rounds, columns=["proposed", "accepted", "emitted"])
    frame.insert(0, "round", range(len(frame)))
    return frame
