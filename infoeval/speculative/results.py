"""The speculative family's typed results (spec-accept, temperature, distill, spec-decode) and their summary.csv
frames: what their JSON holds, read back by ``infoeval.load``."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.output.results import Result

GAMMAS = tuple(range(1, 9))  # the draft lengths γ of spec-accept's expected tokens per target call


@dataclass(frozen=True)
class AcceptResult(Result):
    """spec-accept: per condition (T, mode) the acceptance summary; greedy agreement and its runs."""

    notation: str
    temperatures: tuple[float, ...]
    conditions: tuple[dict, ...]
    top1: dict
    FAMILY = "spec-accept"
    SUMMARY = staticmethod(lambda data: accept_frame(data))


def accept_rows(result: dict) -> list[dict]:
    """One flat row per condition, with stable column names (see ACCEPT_COLUMNS)."""
    rows = []
    t1 = result["top1"]
    for c in result["conditions"]:
        row = {
            k: c[k]
            for k in (
                "temperature",
                "mode",
                "tokens",
                "alpha",
                "alpha_se",
                "kl_mean",
                "kl_se",
                "tv_mean",
                "pearson_r",
                "pearson_n",
                "entropy_p_bits",
                "entropy_q_bits",
                "nll_p",
                "nll_q",
            )
        }
        row["pinsker_violations"] = c["pinsker"]["violations"]
        row["pinsker_max_ratio"] = c["pinsker"]["max_ratio"]
        row["top1"], row["top1_se"] = t1["top1"], t1["top1_se"]
        for q in c["quartiles"]:
            row[f"alpha_{q['quartile'].lower()}"] = q["alpha"]
        for e in c["expected_tokens"]:
            row[f"e_mean_alpha_g{e['gamma']}"] = e["e_mean_alpha"]
            row[f"e_per_position_g{e['gamma']}"] = e["e_per_position"]
        rows.append(row)
    return rows


ACCEPT_COLUMNS = [
    "temperature",
    "mode",
    "tokens",
    "alpha",
    "alpha_se",
    "kl_mean",
    "kl_se",
    "tv_mean",
    "pinsker_violations",
    "pinsker_max_ratio",
    "pearson_r",
    "pearson_n",
    "entropy_p_bits",
    "entropy_q_bits",
    "nll_p",
    "nll_q",
    "top1",
    "top1_se",
    "alpha_q1",
    "alpha_q2",
    "alpha_q3",
    "alpha_q4",
    *[f"e_mean_alpha_g{g}" for g in GAMMAS],
    *[f"e_per_position_g{g}" for g in GAMMAS],
]


def accept_frame(result: dict):
    """The CLI's summary.csv of a spec-accept result: one row per condition, ACCEPT_COLUMNS."""
    import pandas as pd

    return pd.DataFrame(accept_rows(result)).reindex(columns=ACCEPT_COLUMNS)


@dataclass(frozen=True)
class TemperatureResult(Result):
    """temperature: softmax(z/T) of the shown classes at each T."""

    labels: tuple[str, ...]
    logits: tuple[float, ...]
    rows: tuple[dict, ...]
    FAMILY = "temperature"
    SUMMARY = staticmethod(lambda data: temperature_frame(data))


def temperature_frame(result: dict):
    """One row per T: T, p(<label>) for each shown class, other, top_prob, tail_mass, entropy_bits."""
    import pandas as pd

    rows = []
    for r in result["rows"]:
        row = {"temperature": r["temperature"]}
        row.update({f"p({name})": pr for name, pr in zip(result["labels"], r["probs"])})
        row.update({k: r[k] for k in ("other", "top_prob", "tail_mass", "entropy_bits")})
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class DistillResult(Result):
    """distill: the loss terms at each temperature, and the check of the closed-form gradient."""

    notation: str
    alpha: float
    temperatures: tuple[float, ...]
    rows: tuple[dict, ...]
    grad_check: dict
    FAMILY = "distill"
    SUMMARY = staticmethod(lambda data: distill_frame(data))


DISTILL_COLUMNS = [
    "temperature",
    "alpha",
    "tokens",
    "hard_ce",
    "hard_ce_se",
    "kl",
    "kl_se",
    "t2_kl",
    "t2_kl_se",
    "loss",
    "loss_se",
    "soft_ce",
    "hard_ce_bits",
    "kl_bits",
    "t2_kl_bits",
    "loss_bits",
    "soft_ce_bits",
    "teacher_entropy_bits",
    "teacher_entropy_bits_se",
    "teacher_tail_mass",
    "teacher_tail_mass_se",
    "grad_norm",
    "grad_norm_se",
    "t2_grad_norm",
    "t2_grad_norm_se",
]


def distill_frame(result: dict):
    """The CLI's summary.csv of a distill result: its rows, DISTILL_COLUMNS."""
    import pandas as pd

    return pd.DataFrame(result["rows"]).reindex(columns=DISTILL_COLUMNS)


@dataclass(frozen=True)
class DecodeResult(Result):
    """spec-decode: plain and speculative sampling measured, and the model of the speed-up."""

    settings: dict
    plain: dict
    speculative: dict
    speedup: float
    model_of_speedup: dict
    verify: dict | None
    FAMILY = "spec-decode"
    SUMMARY = staticmethod(lambda data: decode_frame(data))


DECODE_COLUMNS = [
    "method",
    "new_tokens",
    "wall_s",
    "tokens_per_s",
    "speedup",
    "target_calls",
    "tokens_per_target_call",
    "draft_calls",
    "proposed",
    "accepted",
    "acceptance",
    "verified",
    "alpha",
]


def decode_frame(result: dict):
    import pandas as pd

    rows = []
    for method in ("plain", "speculative"):
        r = result[method]
        rows.append(
            {
                "method": method,
                **{k: r[k] for k in DECODE_COLUMNS[1:] if k in r},
                "speedup": 1.0 if method == "plain" else result["speedup"],
            }
        )
    frame = pd.DataFrame(rows).reindex(columns=DECODE_COLUMNS)
    for c in ("new_tokens", "target_calls", "draft_calls", "proposed", "accepted", "verified"):
        frame[c] = frame[c].astype("Int64")
    return frame
