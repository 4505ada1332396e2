"""temperature: softmax(z / T) as a table, for a few logits given by hand or a model's next-token logits.

For each T: the probability of each shown class, the top probability, the tail mass 1 − top, and the entropy in
bits, over all classes (the whole vocabulary for a model, whose table shows its ``top`` most likely tokens and
the mass of all the others in one column).

Worked example (logits 9.1, 6.2, 4.6, 3.3 for cat, lion, lynx, dog): at T = 1 softmax gives (0.9353, 0.0515,
0.0104, 0.0028), top 0.9353, tail mass 0.0647, entropy 0.4029 bits; at T = 4, (0.4893, 0.2370, 0.1589, 0.1148),
entropy 1.7769 bits. T → ∞ tends to uniform (2 bits), T → 0 to one-hot (0 bits).
"""

from __future__ import annotations

import math

import torch

from infoeval.engine import last_logits
from infoeval.errors import UsageError, spell
from infoeval.input.provenance import provenance
from infoeval.measure.stats import LN2
from infoeval.speculative.results import TemperatureResult


def parse_logits(spec: str) -> list[float]:
    """'9.1,6.2,4.6,3.3' → floats (at least two, finite)."""
    try:
        vals = [float(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise UsageError(
            f"{spell('logits')} '{spec}' is not a comma-separated list of numbers, e.g. 9.1,6.2,4.6,3.3"
        ) from None
    if len(vals) < 2 or not all(math.isfinite(v) for v in vals):
        raise UsageError(f"{spell('logits')} '{spec}': give at least two finite numbers, e.g. 9.1,6.2,4.6,3.3")
    return vals


def parse_labels(spec: str | None, n: int) -> list[str]:
    if spec is None:
        return [f"z{i}" for i in range(n)]
    labels = [s.strip() for s in spec.split(",")]
    if len(labels) != n:
        raise UsageError(f"{spell('labels')} has {len(labels)} names for {n} logits; give one per logit")
    return labels


def temperature_rows(logits: torch.Tensor, temps, shown: list[int]) -> list[dict]:
    """For each T: probabilities of the ``shown`` indices, the mass of the rest, top probability, tail mass and
    entropy (bits) of softmax(logits / T) over every entry of ``logits`` (1-D)."""
    z = logits.double()
    rows = []
    for t in temps:
        lp = torch.log_softmax(z / t, -1)
        p = lp.exp()
        top = float(p.max())
        probs = [float(p[i]) for i in shown]
        rows.append(
            {
                "temperature": t,
                "probs": probs,
                "other": max(0.0, 1.0 - sum(probs)),
                "top_prob": top,
                "tail_mass": 1.0 - top,
                "entropy_bits": float(-torch.where(p > 0, p * lp, 0.0).sum() / LN2),
            }
        )
    return rows


def _label(tok, i: int) -> str:
    text = tok.decode([i])
    return repr(text)[1:-1] if text.strip() != text or not text.isprintable() else text


@torch.inference_mode()
def model_logits(loaded, prompt: str) -> tuple[torch.Tensor, int]:
    """The next-token logits after ``prompt`` (tokenized as the tokenizer does by default) and its token count."""
    ids = loaded.tokenizer(prompt).input_ids
    if not ids:
        raise UsageError(f"{spell('prompt')} is empty after tokenization; give some text")
    device = next(loaded.model.parameters()).device
    return last_logits(loaded.model, torch.tensor([ids], device=device))[0].float().cpu(), len(ids)


def temperature_table(
    temps,
    logits: list[float] | None = None,
    labels: str | None = None,
    loaded=None,
    prompt: str | None = None,
    top: int = 8,
) -> TemperatureResult:
    """The result for either hand-given ``logits`` or a model's next-token logits after ``prompt``."""
    if loaded is not None:
        z, n_prompt = model_logits(loaded, prompt)
        shown = torch.argsort(z, descending=True)[: min(top, z.numel())].tolist()
        names = [_label(loaded.tokenizer, i) for i in shown]
        source = {
            "kind": "model",
            "model": loaded.info.to_json(),
            "prompt": prompt,
            "prompt_tokens": n_prompt,
            "vocab": int(z.numel()),
            "token_ids": shown,
        }
    else:
        z = torch.tensor(logits, dtype=torch.float64)
        shown = list(range(len(logits)))
        names = parse_labels(labels, len(logits))
        source = {"kind": "logits", "logits": logits}
    return TemperatureResult(
        provenance("temperature", source=source),
        {},
        labels=tuple(names),
        logits=tuple(float(z[i]) for i in shown),
        rows=tuple(temperature_rows(z, temps, shown)),
    )
