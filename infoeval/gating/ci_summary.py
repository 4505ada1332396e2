"""The gate's result for CI: JUnit XML (one testcase per limit and per baseline comparison, the sequential stop
as properties) and the markdown summary (e.g. for $GITHUB_STEP_SUMMARY). No torch."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from infoeval.gating.tables import (
    _num,
    baseline_row,
    candidate_label,
    floor_lines,
    sequential_line,
    sequential_rows,
    verdict_rows,
)


def _sequential_junit_rows(result: dict) -> list[tuple[str, str, str, str, str]]:
    """--sequential as JUnit rows: a limit fails when it failed with confidence, or when the gate failed undecided
    at the budget; a limit still undecided when another one failed is skipped."""
    q, rows = result["sequential"], []
    for check, value, bound, limit, decision, fixed in sequential_rows(result):
        if decision == "UNDECIDED":
            decision = "SKIP" if q["decision"] == "fail" else ("PASS" if result["passed"] else "FAIL")
        rows.append(
            (check, value, f"CS {bound}, {decision.lower()} ({q['decision']}; fixed-budget {fixed})", limit, decision)
        )
    rows += [baseline_row(r) for r in (result.get("baseline") or {}).get("rows", [])]
    return rows


def junit_xml(result: dict) -> bytes:
    """One <testcase> per limit (and per baseline comparison); failures carry the numbers."""
    rows = _sequential_junit_rows(result) if result.get("sequential") else verdict_rows(result)
    suite = ET.Element(
        "testsuite",
        name="infoeval gate",
        tests=str(len(rows)),
        failures=str(sum(1 for r in rows if r[-1] == "FAIL")),
        errors="0",
    )
    cand = candidate_label(result)
    for check, value, judged, limit, verdict in rows:
        case = ET.SubElement(suite, "testcase", classname=f"infoeval.gate.{cand}", name=f"{check} {limit}")
        if verdict == "FAIL":
            ET.SubElement(
                case, "failure", message=f"{check} = {value}; judged {judged}; limit {limit}"
            ).text = f"candidate {cand}: {check} = {value}, judged {judged}, limit {limit}"
        elif verdict == "SKIP":
            ET.SubElement(case, "skipped", message=f"{check}: undecided when another limit failed; {judged}")
    if result.get("sequential"):
        suite.set("skipped", str(sum(1 for r in rows if r[-1] == "SKIP")))
        props = ET.Element("properties")
        suite.insert(0, props)
        q = result["sequential"]
        for key in (
            "decision",
            "stopped_at_window",
            "windows_budget",
            "tokens_used",
            "tokens_budget",
            "saving",
            "alpha",
        ):
            ET.SubElement(props, "property", name=f"sequential.{key}", value=str(q[key]))
    root = ET.Element("testsuites", name="infoeval", tests=suite.get("tests"), failures=suite.get("failures"))
    root.append(suite)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def markdown(result: dict) -> str:
    cand = candidate_label(result, code="`")
    head = "✅ PASS" if result["passed"] else "❌ FAIL"
    m, r = result["metrics"], result["reference"]
    lines = [
        f"### infoeval gate: {head}",
        "",
        f"Candidate **{cand}** against reference `{result['provenance']['reference_file']}` "
        f"({m['tokens']:,} positions; "
        + (
            "KL exact, from the reference's stored hidden states)."
            if result["provenance"].get("reference_kind") == "hidden"
            else f"KL from top-{result['provenance']['top_k']} + {result['provenance']['tail_samples']} tail samples)."
        ),
        "",
        "| check | value ± SE | judged | limit | verdict |",
        "|---|---:|---:|---:|:---:|",
    ]
    if result.get("sequential"):
        lines[-2:] = [
            sequential_line(result) + ".",
            "",
            "| check | value ± SE | CS bound at stop | limit | sequential | fixed-budget |",
            "|---|---:|---:|---:|:---:|:---:|",
        ]
        lines += [f"| {' | '.join(row)} |" for row in sequential_rows(result)]
    else:
        lines += [
            f"| {c} | {v} | {j} | {lim} | {'✅' if ok == 'PASS' else '❌'} |"
            for c, v, j, lim, ok in verdict_rows(result)
        ]
    lines += [
        "",
        f"PPL {_num(r['ppl'], 3)} → {_num(m['ppl'], 3)}; KL lower bound {_num(m['kl_lower_mean'])} nats; "
        f"TV {_num(m['tv_mean'])}.",
        "",
    ]
    floor = floor_lines(result)  # the noise floor and the limits below it
    if floor:
        lines += [*(f"- {line}" for line in floor), ""]
    return "\n".join(lines)
