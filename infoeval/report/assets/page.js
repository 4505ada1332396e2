"use strict";
// infoeval report: draws each run section from the JSON in #data. No network, no library.
const DATA = JSON.parse(document.getElementById("data").textContent);
const TYPED = { f32: Float32Array, u8: Uint8Array, u16: Uint16Array, i32: Int32Array };
function unpack(c) {
  // a packed column (report/packed.py): little-endian typed-array bytes in base64
  if (!c || !c.b64) return c;
  const bin = atob(c.b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new TYPED[c.dtype](bytes.buffer);
}
function unpackTop(t) { return t ? { k: t.k, ids: unpack(t.ids), p: unpack(t.p) } : t; }
for (const sec of DATA.sections) {
  for (const key of ["token", "window", "context", "position"]) sec[key] = unpack(sec[key]);
  sec.ref = { ...sec.ref, nll: unpack(sec.ref.nll), entropy: unpack(sec.ref.entropy), top: unpackTop(sec.ref.top) };
  for (const v of Object.values(sec.variants)) {
    for (const key of ["kl", "dp", "nll", "top1"]) v[key] = unpack(v[key]);
    v.top = unpackTop(v.top);
  }
}
const COLUMNS = { kl: "KL(ref‖variant), nats", dp: "Δp = q(y) − p(y)", nll: "variant NLL, nats", nll_ref: "reference NLL, nats", entropy: "reference entropy, nats" };
const REFERENCE_COLUMNS = ["nll_ref", "entropy"]; // the columns of a section without variants (compress-bits)
const pct = (x) => (x === null || x === undefined) ? "–" : (100 * x).toFixed(2) + " %";
const fmt = (x) => (x === null || x === undefined || Number.isNaN(x)) ? "–" : (Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : x.toFixed(4));
const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function shown(text) {
  // a token as the text it decodes to, with whitespace visible where it matters
  if (text === "") return '<span class="ws">∅</span>';
  let out = esc(text).replace(/\n/g, '<span class="nl">↵</span>\n').replace(/\t/g, '<span class="ws">→</span>\t');
  if (/^ +$/.test(text)) out = '<span class="ws">' + "·".repeat(text.length) + "</span>";
  return out;
}
function plain(text) { return text.replace(/\n/g, "↵").replace(/\t/g, "→").replace(/ /g, "·") || "∅"; }

function quantile(values, q) {
  const v = values.filter((x) => Number.isFinite(x)).map(Math.abs).sort((a, b) => a - b);
  return v.length ? v[Math.min(v.length - 1, Math.floor(q * (v.length - 1)))] : 1;
}
// colour: white → red with the value (a signed column: blue below 0, red above); monotone in the value
function colour(x, scale, signed) {
  if (!Number.isFinite(x)) return "rgb(200,200,200)";
  const t = Math.min(Math.abs(x) / (scale || 1), 1);
  const c = Math.round(255 * (1 - 0.85 * t));
  return (signed && x < 0) ? `rgb(${c},${c},255)` : `rgb(255,${c},${c})`;
}

function values(sec, scheme, column) {
  if (column === "entropy") return sec.ref.entropy;
  if (column === "nll_ref") return sec.ref.nll;
  return sec.variants[scheme][column];
}

function topTable(sec, top, i, label) {
  if (!top) return `<div><b>${label}</b><br>(run with --topk K)</div>`;
  const rows = [];
  for (let j = i * top.k; j < (i + 1) * top.k; j++) {
    const id = top.ids[j];
    rows.push(`<tr><td>${esc(plain(sec.vocab[id] ?? "<" + id + ">"))}</td><td>${id}</td><td>${fmt(top.p[j])}</td></tr>`);
  }
  return `<div><b>${label}</b><table class="top" data-role="${label}"><tr><th>token</th><th>id</th><th>p</th></tr>${rows.join("")}</table></div>`;
}

function tipHtml(sec, scheme, i) {
  const v = sec.variants[scheme];
  const tok = sec.vocab[sec.token[i]] ?? "";
  const head = `<div><b>${esc(plain(tok))}</b> (id ${sec.token[i]}) · position ${sec.position[i]} · window ${sec.window[i]} · context ${sec.context[i]}</div>`;
  if (!v) {
    return head + `<table class="vals"><tr><td>NLL ref</td><td data-k="nll_ref">${fmt(sec.ref.nll[i])}</td><td>bits</td><td data-k="bits">${fmt(sec.ref.nll[i] / Math.LN2)}</td></tr>` +
      `<tr><td>entropy ref</td><td data-k="entropy">${fmt(sec.ref.entropy[i])}</td><td></td><td></td></tr></table>` +
      `<div class="cols">${topTable(sec, sec.ref.top, i, "reference")}</div>`;
  }
  return head +
    `<table class="vals"><tr><td>KL</td><td data-k="kl">${fmt(v.kl[i])}</td><td>Δp</td><td data-k="dp">${fmt(v.dp[i])}</td></tr>` +
    `<tr><td>NLL ref</td><td data-k="nll_ref">${fmt(sec.ref.nll[i])}</td><td>NLL ${esc(scheme)}</td><td data-k="nll">${fmt(v.nll[i])}</td></tr>` +
    `<tr><td>entropy ref</td><td data-k="entropy">${fmt(sec.ref.entropy[i])}</td><td>top-1 agrees</td><td data-k="top1">${v.top1[i] ? "yes" : "no"}</td></tr></table>` +
    `<div class="cols">${topTable(sec, sec.ref.top, i, "reference")}${topTable(sec, v.top, i, scheme)}</div>`;
}

function verdicts(g) {
  // a gate's verdict and its limits, at the top of its section
  const rows = g.verdicts.map((v) => `<tr class="${v.passed ? "pass" : "fail"}"><td>${esc(v.limit)}</td><td>${v.side === "min" ? "≥" : "≤"} ${fmt(v.threshold)}</td>` +
    `<td>${fmt(v.value)}</td><td>${fmt(v.bound)}</td><td>${esc(String(v.judged || ""))}</td><td>${v.passed ? "PASS" : "FAIL"}</td></tr>`);
  const base = (g.baseline || []).map((r) => `<tr class="${r.passed ? "pass" : "fail"}"><td>baseline ${esc(String(r.metric))}</td><td colspan="4">${esc(JSON.stringify(r))}</td><td>${r.passed ? "PASS" : "FAIL"}</td></tr>`);
  const s = g.sequential;
  const seq = s ? `<div class="seq">sequential: <b>${esc(String(s.decision))}</b> at window ${s.stopped_at_window} of ${s.windows_budget} · ${Number(s.tokens_used).toLocaleString()} of ${Number(s.tokens_budget).toLocaleString()} tokens · α ${s.alpha}</div>` : "";
  return `<div class="verdict ${g.passed ? "pass" : "fail"}">gate ${g.passed ? "PASSED" : "FAILED"}</div>${seq}` +
    `<table class="verdicts"><tr><th>limit</th><th>threshold</th><th>value</th><th>bound</th><th>judged by</th><th>verdict</th></tr>${rows.join("")}${base.join("")}</table>`;
}

function header(sec, el) {
  const m = sec.metrics, names = Object.keys(sec.variants), r = sec.reference_metrics || {}, fl = sec.floor;
  // with a noise floor: a "× floor" column, and the floor's own line under the variants
  const xf = (n) => { const v = fl && fl.versus[n]; return v ? `<td>${v.x_floor === null ? "–" : fmt(v.x_floor) + "×"}${v.at_floor ? " at floor" : ""}</td>` : (fl ? "<td></td>" : ""); };
  const rows = names.map((n) => `<tr><td>${esc(n)}</td><td>${fmt(m[n].kl_mean)} ± ${fmt(m[n].kl_se)}</td>${xf(n)}<td>${fmt(m[n].kl_p99)}</td>` +
    `<td>${pct(m[n].top1)}</td><td>${fmt(m[n].ppl_ratio)}</td></tr>`);
  if (fl) rows.push(`<tr class="floor"><td>noise floor (${fl.windows} windows, ${esc(fl.mode)})</td><td>${fmt(fl.kl_mean)} ± ${fmt(fl.kl_se)}</td><td>1×</td>` +
    `<td>${fmt(fl.kl_p99)}</td><td>${pct(1 - fl.top1_disagree)}</td><td></td></tr>`);
  const text = sec.text || {}, proto = sec.protocol || {};
  const comp = sec.compressors ? `<table class="compressors"><tr><th>coder</th><th>bits/byte</th></tr><tr><td>the model</td><td>${fmt(r.bits_per_byte)}</td></tr>` +
    sec.compressors.map((c) => `<tr><td>${esc(c.method)}</td><td>${fmt(c.bits_per_byte)}</td></tr>`).join("") + "</table>" : "";
  el.innerHTML = `<h2>${esc(sec.title)}</h2>` + (sec.gate ? verdicts(sec.gate) : "") +
    `<div class="prov">${esc(sec.kind || "")} · model <code>${esc(String(sec.model))}</code>` + (sec.gate && sec.gate.reference_model ? ` against reference <code>${esc(String(sec.gate.reference_model))}</code>` : "") +
    ` · text <code>${esc(String(text.source || ""))}</code> sha256 <code>${esc(String(text.sha256 || "").slice(0, 12))}</code>` +
    ` · protocol ${esc(String(proto.name || ""))} ctx ${esc(String(proto.ctx || ""))} · ${sec.n.toLocaleString()} positions · ${esc(String(sec.created || ""))}` +
    `<br>command <code>${esc(String(sec.command || ""))}</code></div>` +
    `<div class="refm">reference: PPL ${fmt(r.ppl)} · ${fmt(r.bits_per_byte)} bits/byte · ${Number(r.tokens || 0).toLocaleString()} positions</div>` +
    (names.length ? `<table class="metrics"><tr><th>variant</th><th>mean KL ± SE</th>${fl ? "<th>× floor</th>" : ""}<th>KL P99</th><th>top-1</th><th>PPL ratio</th></tr>${rows.join("")}</table>` : "") + comp;
}

function comparison(rows, el) {
  // several runs of one text and model: every variant of every run in one table
  if (!rows) return;
  const body = rows.map((r) => `<tr><td>${esc(r.run)}</td><td>${esc(r.command)}</td><td>${esc(r.variant)}</td><td>${Number(r.positions || 0).toLocaleString()}</td>` +
    `<td>${r.kl_mean === undefined ? "–" : fmt(r.kl_mean) + " ± " + fmt(r.kl_se)}</td><td>${fmt(r.kl_p99)}</td><td>${pct(r.top1)}</td><td>${fmt(r.ppl_ratio)}</td>` +
    `<td>${fmt(r.bpb_delta)}</td><td>${fmt(r.reference_ppl)}</td><td>${r.passed === null || r.passed === undefined ? "" : (r.passed ? "PASS" : "FAIL")}</td></tr>`);
  el.innerHTML = `<h2>Comparison</h2><table class="comparison"><tr><th>run</th><th>command</th><th>variant</th><th>positions</th><th>mean KL ± SE</th><th>KL P99</th>` +
    `<th>top-1</th><th>PPL ratio</th><th>Δ bits/byte</th><th>reference PPL</th><th>gate</th></tr>${body.join("")}</table>`;
}

function section(sec, index) {
  const root = document.createElement("section");
  root.id = "run-" + index;
  const head = document.createElement("div"); header(sec, head); root.appendChild(head);
  const names = Object.keys(sec.variants);
  const columns = Object.entries(COLUMNS).filter(([k]) => names.length || REFERENCE_COLUMNS.includes(k));
  const controls = document.createElement("div"); controls.className = "controls";
  controls.innerHTML = `<label${names.length ? "" : " hidden"}>variant <select class="scheme">${names.map((n) => `<option>${esc(n)}</option>`).join("")}</select></label>` +
    `<label>colour by <select class="column">${columns.map(([k, t]) => `<option value="${k}">${esc(t)}</option>`).join("")}</select></label>` +
    `<span class="legend"><span class="lo">0</span> <span class="bar"></span> <span class="hi"></span></span>` +
    `<span class="pager"><button class="prev">◀</button><span class="page"></span><button class="next">▶</button></span>`;
  root.appendChild(controls);
  const text = document.createElement("div"); text.className = "text"; root.appendChild(text);
  const worst = document.createElement("div"); worst.className = "worst"; root.appendChild(worst);
  const plots = document.createElement("details"); plots.className = "plots"; plots.open = true; root.appendChild(plots);
  plots.innerHTML = "<summary>Plots</summary>" + (sec.plots && sec.plots.length
    ? sec.plots.map((p) => `<figure data-plot="${esc(p.name)}"><figcaption>${esc(p.title)}</figcaption>${p.svg}</figure>`).join("")
    : `<p class="missing">${esc(DATA.plots_missing || "no plots")}</p>`);
  const state = { page: 0, scheme: names[0], column: columns[0][0], rank: "kl" };
  const pages = Math.max(1, Math.ceil(sec.n / DATA.page));

  function draw() {
    const v = values(sec, state.scheme, state.column), signed = state.column === "dp";
    const scale = quantile(v, 0.99);
    const a = state.page * DATA.page, b = Math.min(sec.n, a + DATA.page);
    const parts = [];
    for (let i = a; i < b; i++) {
      parts.push(`<span class="t" data-i="${i}" style="background:${colour(v[i], scale, signed)}">${shown(sec.vocab[sec.token[i]] ?? "")}</span>`);
    }
    text.innerHTML = parts.join("");
    controls.querySelector(".page").textContent = ` page ${state.page + 1} of ${pages} `;
    controls.querySelector(".hi").textContent = (signed ? "±" : "") + fmt(scale) + " (P99)";
    controls.querySelector(".lo").textContent = signed ? "−" : "0";
    controls.querySelector(".bar").style.background = signed ? "linear-gradient(90deg, rgb(38,38,255), white, rgb(255,38,38))" : "linear-gradient(90deg, white, rgb(255,38,38))";
    const sv = sec.variants[state.scheme];
    const byDp = sv && state.rank === "dp";
    const [w, label, a1, a2, c1, c2] = sv ? [byDp ? sv.worst_dp : sv.worst, "", sv.kl, sv.dp, "KL", "Δp"] : [sec.ref.worst, "Most surprising tokens (largest NLL)", sec.ref.nll, sec.ref.entropy, "NLL", "entropy"];
    const heading = sv ? `<select class="rank"><option value="kl">Largest KL</option><option value="dp"${byDp ? " selected" : ""}>Largest drop in p(token), Δp most negative</option></select>: ${esc(state.scheme)}` : esc(label);
    worst.innerHTML = `<h3>${heading}</h3><table><tr><th>position</th><th>${c1}</th><th>${c2}</th><th>context (±20 tokens)</th></tr>` +
      w.map((i) => `<tr><td><a data-i="${i}">${sec.position[i]}</a></td><td>${fmt(a1[i])}</td><td>${fmt(a2[i])}</td><td>` +
        esc(plain(context(sec, i, 20))) + "</td></tr>").join("") + "</table>";
  }
  function context(s, i, k) {
    let out = "";
    for (let j = Math.max(0, i - k); j <= Math.min(s.n - 1, i + k); j++) out += (j === i ? "⟦" : "") + (s.vocab[s.token[j]] ?? "") + (j === i ? "⟧" : "");
    return out;
  }
  function show(span) {
    const tip = document.getElementById("tip"), i = Number(span.dataset.i);
    tip.innerHTML = tipHtml(sec, state.scheme, i);
    tip.dataset.i = String(i); tip.dataset.scheme = state.scheme;
    const r = span.getBoundingClientRect();
    tip.style.left = Math.min(r.left, window.innerWidth - 420) + "px";
    tip.style.top = (r.bottom + 6 + 260 > window.innerHeight ? Math.max(0, r.top - 266) : r.bottom + 6) + "px";
    tip.hidden = false;
  }
  text.addEventListener("mouseover", (e) => { if (e.target.closest(".t")) show(e.target.closest(".t")); });
  text.addEventListener("click", (e) => { if (e.target.closest(".t")) show(e.target.closest(".t")); });
  text.addEventListener("mouseleave", () => { document.getElementById("tip").hidden = true; });
  worst.addEventListener("change", (e) => { if (e.target.matches("select.rank")) { state.rank = e.target.value; draw(); } });
  worst.addEventListener("click", (e) => {
    const a = e.target.closest("a[data-i]"); if (!a) return;
    const i = Number(a.dataset.i); state.page = Math.floor(i / DATA.page); draw();
    const span = text.querySelector(`.t[data-i="${i}"]`); span.classList.add("sel"); span.scrollIntoView({ block: "center" }); show(span);
  });
  controls.querySelector(".scheme").addEventListener("change", (e) => { state.scheme = e.target.value; draw(); });
  controls.querySelector(".column").addEventListener("change", (e) => { state.column = e.target.value; draw(); });
  controls.querySelector(".prev").addEventListener("click", () => { if (state.page > 0) { state.page--; draw(); } });
  controls.querySelector(".next").addEventListener("click", () => { if (state.page < pages - 1) { state.page++; draw(); } });
  draw();
  return root;
}

comparison(DATA.comparison, document.getElementById("comparison"));
DATA.sections.forEach((sec, i) => document.getElementById("sections").appendChild(section(sec, i)));
performance.mark("infoeval-ready");
requestAnimationFrame(() => setTimeout(() => performance.mark("infoeval-painted"), 0)); // after the next frame: the text is on screen
document.body.dataset.ready = "1";
