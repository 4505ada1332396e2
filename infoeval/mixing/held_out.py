"""Where mix's per-unit KLs come from, kept apart from the measured tokens: a sweep on the tokens right after the
measured windows, or the ``--sensitivity`` files, with the held-out record saying whether they could overlap."""

from __future__ import annotations

import dataclasses

from infoeval.errors import DataError, spell
from infoeval.input.prepare import Prepared, Reporter
from infoeval.input.settings import TextSettings
from infoeval.input.windows import describe
from infoeval.mixing.problem import load_sensitivity, split_windows
from infoeval.mixing.settings import MixSettings


def _subset(p: Prepared, windows, note: str, max_tokens: int) -> Prepared:
    """``p`` restricted to some windows, its protocol recounted and the split noted in its rule."""
    proto = dataclasses.replace(
        p.protocol, rule=f"{p.protocol.rule}; {note}", max_tokens=max_tokens, **describe(list(windows), len(p.stream))
    )
    return dataclasses.replace(p, windows=tuple(windows), protocol=proto)


def _span(windows) -> dict:
    return {
        "windows": len(windows),
        "first_target": windows[0].first_target,
        "last_target": windows[-1].first_target + windows[-1].n_scored - 1,
        "tokens": sum(w.n_scored for w in windows),
    }


def per_unit_kls(
    p: Prepared, text_settings: TextSettings, mix_settings: MixSettings, schemes, reporter: Reporter
) -> tuple[Prepared, list, dict, dict]:
    """(the measured part of ``p``, unit rows, the sweep's JSON or None, the held-out record)."""
    from infoeval.sensitivities import sweep_prepared

    if mix_settings.sensitivity:
        rows, meta = load_sensitivity(mix_settings.sensitivity)
        sha = p.text.sha256
        overlap = any(m["provenance"].get("text", {}).get("sha256") == sha and not m.get("split") for m in meta)
        held = {
            "measured": _span(p.windows),
            "sweep": [{"file": m["file"], "split": m["split"]} for m in meta],
            "overlap_possible": overlap,
            "note": "the sensitivity file was measured on this same text; its tokens may overlap the measured ones"
            if overlap
            else "the sensitivity file comes from another text or a held-out split",
        }
        return p, rows, None, held
    measured, swept = split_windows(p.windows, text_settings.max_tokens)
    if not swept or not measured:
        raise DataError(
            f"the text has no tokens after the {text_settings.max_tokens:,} measured ones for the sweep; use a "
            f"longer text or a smaller {spell('max_tokens')}"
        )
    span = {"measured": _span(measured), "sweep": _span(swept)}
    note = (
        f"sweep on stream tokens {span['sweep']['first_target']}…{span['sweep']['last_target']}, after the "
        "measured ones"
    )
    sens = sweep_prepared(
        _subset(p, swept, note, mix_settings.sweep_tokens),
        schemes,
        mix_settings.by,
        block_cache=mix_settings.block_cache,
        proxy=False,
        reporter=reporter,
    )
    data = sens.to_json() | {"held_out_split": span}
    held = span | {"overlap_possible": False, "note": "the sweep read the tokens right after the measured ones"}
    return (
        _subset(p, measured, "measured windows: the first --max-tokens tokens", text_settings.max_tokens),
        data["units"],
        data,
        held,
    )
