"""`mix`: the exact solver against exhaustive search, the budget, the problem built from sensitivity rows, and the
pipeline on a tiny model (held-out split, uniform numbers equal quantize-compare's, the recipe round trip)."""

from __future__ import annotations

import dataclasses
import json
import sys
from fractions import Fraction

import numpy as np
import pytest

from infoeval.errors import UsageError
from infoeval.input.windows import rolling_windows
from infoeval.mixing import solve as solver
from infoeval.mixing.problem import Problem, Unit, build_problem, parse_budget, parse_sweep, split_windows
from infoeval.quant.bits import layer_bits
from infoeval.quant.schemes import parse_scheme

pytestmark = pytest.mark.usefixtures("one_thread")


def _instance(seed: int):
    rng = np.random.default_rng(seed)
    units, options = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    cost = rng.integers(1, 60, size=(units, options)) * int(rng.integers(1, 5))
    kl = rng.random((units, options))
    if options > 1 and rng.random() < 0.3:
        kl[rng.integers(units), rng.integers(options)] = np.nan  # an option that was not measured
    weights = int(rng.integers(3, 40))
    lo, hi = int(cost.min(1).sum()), int(cost.max(1).sum())
    budget = Fraction(int(rng.integers(lo, hi + 3)), weights)  # between the cheapest and past the dearest mix
    return kl, cost, weights, budget


@pytest.mark.parametrize("seed", range(400))
def test_exact_solver_equals_exhaustive_search_and_keeps_the_budget(seed):
    kl, cost, weights, budget = _instance(seed)
    try:
        want = solver.exhaustive(kl, cost, weights, budget)
    except UsageError:
        with pytest.raises(UsageError):
            solver.solve(kl, cost, weights, [budget])
        return
    got = solver.solve(kl, cost, weights, [budget])[0]
    assert got.method == "exact"
    assert got.total_bits <= budget * weights  # never over the budget, compared exactly
    assert Fraction(got.total_bits, weights) <= budget
    assert got.predicted_kl == pytest.approx(want.predicted_kl, rel=1e-12, abs=1e-15)
    rows = np.arange(len(got.picks))
    assert got.predicted_kl == pytest.approx(float(np.asarray(kl)[rows, list(got.picks)].sum()), rel=1e-12)


@pytest.mark.parametrize("seed", range(60))
def test_lagrangian_is_feasible_and_its_gap_bounds_the_optimum(seed):
    kl, cost, weights, budget = _instance(seed)
    kl = np.nan_to_num(kl, nan=1.0)
    try:
        want = solver.exhaustive(kl, cost, weights, budget)
    except UsageError:
        return
    got = solver.lagrangian(kl, cost, weights, budget)
    assert got.total_bits <= budget * weights
    assert got.gap >= 0 and got.predicted_kl - got.gap <= want.predicted_kl + 1e-12 <= got.predicted_kl + 1e-12


def test_one_table_answers_every_budget_and_kl_falls_with_bits():
    kl, cost, weights, _ = _instance(7)
    kl = np.nan_to_num(kl, nan=1.0)
    lo, hi = int(cost.min(1).sum()), int(cost.max(1).sum())
    budgets = [Fraction(c, weights) for c in range(lo, hi + 1, max(1, (hi - lo) // 9))]
    many = solver.solve(kl, cost, weights, budgets)
    assert [c.predicted_kl for c in many] == [solver.solve(kl, cost, weights, [b])[0].predicted_kl for b in budgets]
    assert all(a.predicted_kl >= b.predicted_kl for a, b in zip(many, many[1:]))


def test_large_problems_fall_back_to_the_lagrangian_with_its_gap(monkeypatch):
    kl, cost, weights, budget = _instance(3)
    kl = np.nan_to_num(kl, nan=1.0)
    monkeypatch.setattr(solver, "MAX_CELLS", 1)
    got = solver.solve(kl, cost, weights, [Fraction(int(cost.max(1).sum()), weights)])[0]
    assert got.method == "lagrangian" and got.gap >= 0


def test_budget_below_the_cheapest_mix_is_a_usage_error():
    kl, cost = np.ones((2, 2)), np.array([[300, 400], [300, 500]])
    with pytest.raises(UsageError, match="below the cheapest mix"):
        solver.solve(kl, cost, 200, ["2.99"])
    assert solver.solve(kl, cost, 200, ["3"])[0].total_bits == 600  # exactly at the cheapest: allowed
    with pytest.raises(UsageError, match="not a number"):
        solver.as_budget("four")


def test_budget_boundaries_are_exact():
    # 3 weights; a budget of 10/3 allows 10 bits: both units at their 5-bit option, never 11
    kl, cost = np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([[4, 5], [4, 6]])
    assert solver.solve(kl, cost, 3, [Fraction(10, 3)])[0].picks == (1, 0)
    assert solver.solve(kl, cost, 3, [Fraction(11, 3) - Fraction(1, 10**9)])[0].picks == (1, 0)
    assert solver.solve(kl, cost, 3, [Fraction(11, 3)])[0].picks == (1, 1)


def test_parse_sweep():
    assert parse_sweep("3.5:4.5:0.5") == [Fraction(7, 2), Fraction(4), Fraction(9, 2)]
    for bad in ("3:2:1", "3:4", "3:4:0", "a:b:c"):
        with pytest.raises(UsageError, match="sweep"):
            parse_sweep(bad)


def _rows(units: dict[str, list[str]], schemes, kl=lambda u, s: 0.1) -> list[dict]:
    return [
        {"unit": u, "kind": "linear", "layers": layers, "scheme": s, "kl_mean": kl(u, s), "kl_se": 0.0}
        for u, layers in units.items()
        for s in schemes
    ]


def test_problem_costs_are_exact_stored_bits_and_budget_names_a_scheme():
    shapes = {"a": (4, 576), "b": (8, 1536)}
    schemes = [parse_scheme(s) for s in ("int4-g128", "int8-channel")]
    p = build_problem(_rows({"A": ["a"], "B": ["b"]}, [s.name for s in schemes]), schemes, shapes)
    assert p.units[0].bits == (layer_bits(schemes[0], (4, 576)), layer_bits(schemes[1], (4, 576)))
    budget, name = parse_budget("int4-g128", p)
    assert name == "int4-g128" and budget == Fraction(4 * (576 * 4 + 80) + 8 * (1536 * 4 + 12 * 16), 4 * 576 + 8 * 1536)
    assert parse_budget("4.5", p) == (Fraction(9, 2), None)
    with pytest.raises(UsageError, match="name one of schemes"):
        parse_budget("int5-g128", p)


@pytest.mark.parametrize(
    "rows,message",
    [
        (_rows({"A": ["a"]}, ["int4-g128"]), "was not measured with int8-channel"),
        (_rows({"A": ["zz"]}, ["int4-g128", "int8-channel"]), "names layer zz"),
        (_rows({"A": ["a"], "B": ["a"]}, ["int4-g128", "int8-channel"]), "overlap"),
        (_rows({"A": ["a"]}, ["int3-g64"]), "no unit measured with"),
    ],
)
def test_bad_sensitivity_rows(rows, message):
    with pytest.raises(Exception, match=message) as e:
        build_problem(rows, [parse_scheme("int4-g128"), parse_scheme("int8-channel")], {"a": (4, 64)})
    assert e.value.exit_code == 2


def test_split_windows_is_disjoint():
    windows = rolling_windows(1 + 1024 + 256, 128)
    measured, swept = split_windows(windows, 1024)
    assert sum(w.n_scored for w in measured) == 1024 and sum(w.n_scored for w in swept) == 256
    assert max(w.first_target + w.n_scored - 1 for w in measured) < min(w.first_target for w in swept)


# ------------------------------------------------------------------------------------------ the pipeline
@pytest.fixture(scope="module")
def mixed(tiny_llama_dir, tmp_path_factory):
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
    from infoeval.mixing.mix import MixSettings, mix

    settings = (ModelSettings(str(tiny_llama_dir), device="cpu"), TextSettings(max_tokens=512), WindowSettings(ctx=128))
    mix_settings = MixSettings(
        schemes="int3-g64,int4-g64,int8-channel", budget="int4-g64", by="linear", sweep="3.5:5:0.5", sweep_tokens=256
    )
    result, cols, sweep_json = mix(*settings, mix_settings)
    return settings, mix_settings, result.to_json(), cols, sweep_json, tmp_path_factory.mktemp("mix")


def test_mix_measures_held_out_tokens_after_the_sweep(mixed):
    _, _, data, cols, sweep_json, _ = mixed
    held = data["held_out"]
    assert held["measured"]["tokens"] == 512 and held["sweep"]["tokens"] == 256
    assert held["measured"]["last_target"] < held["sweep"]["first_target"]
    assert sweep_json["provenance"]["protocol"]["scored_tokens"] == 256 and cols.n == 512
    assert data["provenance"]["protocol"]["scored_tokens"] == 512


def test_mix_uniform_points_equal_quantize_compare(mixed):
    from infoeval.comparison.compare import quantize_compare
    from infoeval.quant.variant_settings import VariantSettings

    settings, mx, data, _, _, _ = mixed
    qc, _ = quantize_compare(*settings, VariantSettings(schemes=mx.schemes))
    rows = {r["name"]: r for r in data["measured"]}
    for v in qc.variants:
        assert rows[v.name]["metrics"] == v.metrics  # the same windows, the same numbers, bit for bit


def test_mix_rows_are_consistent(mixed):
    _, _, data, _, _, _ = mixed
    schemes = data["settings"]["schemes"]
    rows = {r["name"]: r for r in data["measured"]}
    for _k, s in enumerate(schemes):  # predicted for a uniform scheme = Σ of its units' own KLs
        assert rows[s]["predicted_kl"] == pytest.approx(
            sum(u["schemes"][s]["kl_mean"] for u in data["units"]), rel=1e-12
        )
    main = data["solutions"][0]
    assert main["bits_per_weight"] <= data["settings"]["budget_bits"] + 1e-12
    assert main["bits_per_weight"] <= rows["int4-g64"]["bits_per_weight"]
    assert main["predicted_kl"] <= rows["int4-g64"]["predicted_kl"]
    assert data["target"]["uniform"] == "int4-g64" and data["target"]["mix"] == main["variant"]
    assert [s["budget_bits"] for s in data["solutions"]] == [data["settings"]["budget_bits"], 3.5, 4.0, 4.5, 5.0]
    for s in data["solutions"]:
        assert s["bits_per_weight"] <= s["budget_bits"] + 1e-12 and s["variant"] in rows
        assert rows[s["variant"]]["additivity"] == pytest.approx(rows[s["variant"]]["measured_kl"] / s["predicted_kl"])


def test_recipe_round_trip_gives_the_measured_numbers_again(mixed):
    from infoeval.comparison.compare import quantize_compare
    from infoeval.quant.variant_settings import VariantSettings

    settings, _, data, _, _, tmp = mixed
    main = data["solutions"][0]["variant"]
    path = tmp / f"{main}.toml"
    path.write_text(data["exports"]["recipe"], encoding="utf-8")
    qc, _ = quantize_compare(*settings, VariantSettings(schemes="", recipes=(path,)))
    (v,) = qc.variants
    assert v.name == main
    assert v.metrics == next(r for r in data["measured"] if r["name"] == main)["metrics"]
    assert v.quantization["bits_per_weight"] == pytest.approx(data["solutions"][0]["bits_per_weight"], rel=1e-15)


def test_mix_from_its_own_sensitivity_file(mixed, monkeypatch):
    from infoeval.mixing.mix import mix

    settings, mx, data, _, sweep_json, tmp = mixed
    path = tmp / "sens.json"
    path.write_text(json.dumps(sweep_json), encoding="utf-8")
    again, _, none = mix(*settings, dataclasses.replace(mx, sensitivity=(path,), sweep=None, by="type"))
    again = again.to_json()
    assert none is None and again["held_out"]["overlap_possible"] is False
    # the file's units are by linear: the result says so, whatever --by (here its default, type) says
    assert again["settings"]["by"] == again["sensitivity"]["by"] == again["provenance"]["by"] == "linear"
    assert again["solutions"][0]["choice"] == data["solutions"][0]["choice"]
    main = data["solutions"][0]["variant"]
    assert {r["name"]: r["metrics"] for r in again["measured"]}[main] == {
        r["name"]: r["metrics"] for r in data["measured"]
    }[main]


def _main(args, monkeypatch, capsys):
    from infoeval.cli import main

    monkeypatch.setattr(sys, "argv", ["infoeval", *map(str, args)])
    code = main()
    out = capsys.readouterr()
    return code, out.out, out.err


def _fails_with_one_line(args, message, out_dir, monkeypatch, capsys) -> None:
    """The command exits 2 with one line naming ``message`` and leaves no ``out_dir``."""
    code, _, err = _main(args, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("infoeval: error: ") and message in lines[0], err
    assert not out_dir.exists()


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--budget-bits", "2"], "below the cheapest mix"),
        (["--budget-bits", "int5-g64"], "name one of --schemes"),
        (["--schemes", "int4-g64,int9-g64"], "9 bits is not supported"),
        (["--by", "layer"], "--by 'layer'"),
        (["--sweep", "5:4:1"], "--sweep"),
        (["--schemes", "int4-g64,int5-g64"], "was not measured with int5-g64"),
    ],
)
def test_bad_mix_options_exit_2_with_one_line(mixed, tiny_llama_dir, monkeypatch, capsys, extra, message):
    _, _, _, _, sweep_json, tmp = mixed
    path = tmp / "sens-cli.json"
    path.write_text(json.dumps(sweep_json), encoding="utf-8")
    args = [
        "mix",
        tiny_llama_dir,
        "--sensitivity",
        path,
        "--max-tokens",
        "128",
        "--ctx",
        "64",
        "--out-dir",
        tmp / "bad",
        "--schemes",
        "int3-g64,int4-g64,int8-channel",
        "--budget-bits",
        "int4-g64",
        *extra,
    ]
    _fails_with_one_line(args, message, tmp / "bad", monkeypatch, capsys)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--budget-bits", "2"], "below the cheapest mix"),
        (["--budget-bits", "4", "--sweep", "1:5:1"], "--budget-bits 1 is below the cheapest mix"),
        (["--budget-bits", "abc"], "is not a number"),
        (["--budget-bits", "int5-g64"], "name one of --schemes"),
    ],
)
def test_bad_budgets_fail_before_the_sweep(tiny_llama_dir, tmp_path, monkeypatch, capsys, extra, message):
    import infoeval.sensitivities

    def no_sweep(*a, **k):
        raise AssertionError("the sweep ran before the budget was checked")

    monkeypatch.setattr(infoeval.sensitivities, "sweep_prepared", no_sweep)
    args = [
        "mix",
        tiny_llama_dir,
        "--max-tokens",
        "128",
        "--sweep-tokens",
        "64",
        "--ctx",
        "64",
        "--out-dir",
        tmp_path / "bad",
        "--schemes",
        "int3-g64,int4-g64,int8-channel",
        "--by",
        "type",
        *extra,
    ]
    _fails_with_one_line(args, message, tmp_path / "bad", monkeypatch, capsys)


def test_mix_cli_writes_the_exports(mixed, tiny_llama_dir, monkeypatch, capsys):
    _, _, _, _, sweep_json, tmp = mixed
    path = tmp / "sens-cli2.json"
    path.write_text(json.dumps(sweep_json), encoding="utf-8")
    out = tmp / "cli"
    code, stdout, err = _main(
        [
            "mix",
            tiny_llama_dir,
            "--sensitivity",
            path,
            "--max-tokens",
            "512",
            "--ctx",
            "128",
            "--by",
            "linear",
            "--schemes",
            "int3-g64,int4-g64,int8-channel",
            "--budget-bits",
            "int4-g64",
            "--out-dir",
            out,
            "-q",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {
        "result.json",
        "summary.csv",
        "positions.csv",
        "recipe.toml",
        "tensor-types.txt",
        "quantization_config.json",
    }
    assert "Held-out measurement" in stdout and "ratio" in stdout
    code, _, err = _main(
        [
            "quantize-compare",
            tiny_llama_dir,
            "--recipe",
            out / "recipe.toml",
            "--max-tokens",
            "512",
            "--ctx",
            "128",
            "--json",
            out / "qc.json",
            "-q",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    qc = json.loads((out / "qc.json").read_text())
    mixres = json.loads((out / "result.json").read_text())
    main = mixres["solutions"][0]["variant"]
    (v,) = qc["variants"]
    assert v["name"] == "recipe" and v["metrics"] == next(r for r in mixres["measured"] if r["name"] == main)["metrics"]


def test_problem_assignment_and_prediction():
    s = (parse_scheme("int4-g64"), parse_scheme("int8-channel"))
    p = Problem(
        s,
        (
            Unit("A", "type", ("a1", "a2"), 10, (0.5, 0.1), (0, 0), (40, 80)),
            Unit("B", "type", ("b",), 5, (0.3, 0.2), (0, 0), (20, 40)),
        ),
    )
    assert p.assignment((1, 0)) == {"a1": s[1], "a2": s[1], "b": s[0]}
    assert p.predicted((1, 0)) == pytest.approx(0.4) and p.uniform_bits(0) == Fraction(60, 15)
