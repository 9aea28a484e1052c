// pytest-glm5 report page: draws the run held in #glm5-data with uPlot. No network access.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("glm5-data").textContent);
  const COLORS = ["#175cd3", "#d92d20", "#067647", "#b54708", "#7a5af8", "#0e9384", "#c11574", "#475467"];
  const state = { expected: 0, drawn: 0, errors: [] };
  window.glm5 = state;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }
  function num(x) {
    if (x == null || Number.isNaN(x)) return "-";
    const a = Math.abs(x);
    return a >= 1000 ? Math.round(x).toLocaleString("en-US") : a >= 10 ? x.toFixed(1) : x.toPrecision(3);
  }
  function pct(x) { return (x >= 0 ? "+" : "") + (x * 100).toFixed(1) + "%"; }
  function badge(v) { return el("span", { class: "badge b-" + v.replace(/ /g, "-"), text: v }); }

  // --- header
  const run = D.run || {};
  const regs = D.counts.regression || 0, wrong = D.counts.invalid || 0;
  const head = document.getElementById("head");
  head.append(el("h1", { text: wrong ? `${wrong} invalid (faster, but wrong)` :
    regs ? `${regs} regression${regs === 1 ? "" : "s"}` : "No regression" }));
  // The run's one outcome, as its terminal's last line, its exit status and its other reports say it.
  if (D.outcome && D.outcome.line) head.append(el("div", { class: "outcome", text: D.outcome.line }));
  head.append(el("div", { class: "meta", text: [run.hardware, run.commit && "commit " + run.commit, run.build,
    run.time, run.duration_s != null && `${Math.round(run.duration_s)} s`].filter(Boolean).join(" · ") }));
  const pills = el("div", { class: "pills" });
  const kinds = [["invalid", "bad"], ["regression", "bad"], ["improvement", "good"], ["pass", ""], ["unresolved", "warn"], ["new", ""],
    ["workload changed", "warn"], ["emulator-bound", "warn"], ["client-bound", "warn"], ["too few requests", "warn"], ["throttled", "warn"], ["known cost", ""]];
  for (const [k, cls] of kinds) if (D.counts[k]) pills.append(el("span", { class: "pill " + cls, text: `${D.counts[k]} ${k}` }));
  if (D.crashes) pills.append(el("span", { class: "pill bad", text: `${D.crashes} crashed` }));
  const suspects = D.verdicts.filter(v => v.sp).length;
  if (suspects) pills.append(el("span", { class: "pill warn", text: `${suspects} suspect (one launch beyond the tolerance)` }));
  head.append(pills);
  // The night: what the schedule ran, what waits and when, what the budget allowed.
  const later = Object.entries(run.not_run || {});
  const sched = run.schedule, hrs = s => s >= 3600 ? (s / 3600).toFixed(1) + " h" : Math.round(s / 60) + " min";
  const night = [sched && `tonight: ${sched.tonight.join(", ")} (every config judged at least every ${sched.cover} nights)`,
    ...later.map(([c, why]) => `${c}: ${why}`),
    run.budget_s && `budget ${hrs(run.budget_s)}, ${hrs(run.charged_s || 0)} planned`].filter(Boolean);
  if (night.length) head.append(el("ul", { class: "night" }, ...night.map(x => el("li", { text: x }))));

  // --- verdict table, regressions first (the order comes sorted)
  const vs = document.getElementById("verdicts");
  const card = el("div", { class: "card" });
  vs.append(el("h2", { text: `Verdicts (${D.verdicts.length})` }), card);
  const filter = el("input", { class: "filter", placeholder: "filter: config, metric, verdict…", type: "search" });
  const table = el("table", { id: "verdict-table" });
  table.append(el("thead", {}, el("tr", {}, ...["verdict", "config", "scenario", "metric", "measured", "bound",
    "change", "target"].map(h => el("th", { text: h })))));
  const tbody = el("tbody");
  for (const v of D.verdicts) {
    const bound = v.vs && !v.k ? v.vs : v.k ? `${v.k} ${num(v.b)} ${v.u}` : "-";
    tbody.append(el("tr", { class: v.verdict.replace(/ /g, "-") },
      el("td", {}, badge(v.verdict)), el("td", { text: v.c }), el("td", { text: v.s }), el("td", { text: v.m }),
      el("td", { class: "num" }, `${num(v.v)} ${v.u}`, v.n ? el("div", { class: "ev", text: `${v.m.split("_")[0]} of ` +
        `${v.n.toLocaleString("en-US")} ${v.nw}` + (v.ci ? ` pooled: ${num(v.pc)} (95% CI ${num(v.ci[0])}-${num(v.ci[1])})` : "") }) : null),
      el("td", { class: "num", text: bound }),
      el("td", {}, el("span", { class: "ev", text: v.ev + (v.note ? " · " + v.note : "") })),
      el("td", { class: "ev", text: v.tt || "" })));
  }
  table.append(tbody);
  filter.addEventListener("input", () => {
    const q = filter.value.toLowerCase();
    for (const tr of tbody.rows) tr.style.display = tr.textContent.toLowerCase().includes(q) ? "" : "none";
  });
  card.append(filter, el("div", { class: "tablewrap" }, table));

  // --- charts, drawn when they scroll into view
  const pending = new Map();
  const io = new IntersectionObserver(entries => {
    for (const e of entries) {
      if (!e.isIntersecting || !pending.has(e.target)) continue;
      const draw = pending.get(e.target);
      pending.delete(e.target);
      io.unobserve(e.target);
      try { draw(e.target); state.drawn++; } catch (err) { state.errors.push(String(err)); throw err; }
    }
  }, { rootMargin: "200px" });
  function chart(parent, title, draw, wide) {
    const box = el("div", { class: "chart card" + (wide ? " wide" : "") }, el("h3", { text: title }));
    const target = el("div");
    box.append(target);
    parent.append(box);
    state.expected++;
    pending.set(target, draw);
    io.observe(target);
  }
  function width(t) { return Math.max(320, t.parentElement.clientWidth - 32); }
  function line(label, color, extra) { return Object.assign({ label, stroke: color, width: 2, spanGaps: true }, extra || {}); }
  function dots(label, color) { return { label, stroke: color, fill: color, paths: () => null, points: { show: true, size: 6, fill: color } }; }

  function throughput(t, c) {
    const xs = c.sweep.map(p => p.conc);
    const n = Math.max(0, ...c.sweep.map(p => p.launches.length));
    const lo = c.sweep.map(p => p.floor == null ? null : p.floor * (1 - (p.tol || 0)));
    const hi = c.sweep.map(p => p.ref_max != null ? Math.max(p.ref_max, p.floor) : p.floor);
    const series = [{ label: "concurrency" }, line("band low", "#98a2b3", { dash: [4, 4], width: 1 }),
      line("baseline", "#98a2b3", { width: 1 }), line("today", COLORS[0], { points: { show: true, size: 7 } })];
    const data = [xs, lo, hi, c.sweep.map(p => p.value)];
    for (let i = 0; i < n; i++) { series.push(dots(`launch ${i + 1}`, COLORS[(i % 6) + 1] + "aa")); data.push(c.sweep.map(p => p.launches[i] ?? null)); }
    const tgt = c.sweep.map(p => p.target ?? null);
    if (tgt.some(x => x != null)) { series.push(line("target", COLORS[2], { dash: [8, 4] })); data.push(tgt); }
    new uPlot({ width: width(t), height: 230, scales: { x: { time: false, distr: 3, log: 2 }, y: { distr: 3 } },
      series, bands: [{ series: [2, 1], fill: "rgba(152,162,179,0.25)" }],
      axes: [{ label: "concurrency (log scale)" }, { label: "output tok/s (log scale)", size: 70 }] }, data, t);
  }
  function strips(t, c) {
    // One strip per scenario: the reference launches left of its tick, today's right, as changes from the
    // reference's mean; the dashed red segment is the tolerance below it.
    const S = c.strips, pts = [];
    S.forEach((s, i) => {
      s.ref.forEach((y, k) => pts.push([i + 1 - 0.3 + 0.2 * k / Math.max(1, s.ref.length), 1, y]));
      s.today.forEach((y, k) => pts.push([i + 1 + 0.1 + 0.2 * k / Math.max(1, s.today.length), 2, y]));
    });
    pts.sort((a, b) => a[0] - b[0]);
    const data = [pts.map(p => p[0]), pts.map(p => p[1] === 1 ? p[2] : null), pts.map(p => p[1] === 2 ? p[2] : null)];
    const mark = u => {
      const ctx = u.ctx;
      ctx.save();
      ctx.lineWidth = devicePixelRatio;
      S.forEach((s, i) => {
        const x0 = u.valToPos(i + 0.6, "x", true), x1 = u.valToPos(i + 1.4, "x", true);
        for (const [y, color, dash] of [[0, "#98a2b3", []], [-(s.tol || 0), "#d92d20", [5, 4]]]) {
          const py = u.valToPos(y, "y", true);
          ctx.strokeStyle = color; ctx.setLineDash(dash);
          ctx.beginPath(); ctx.moveTo(x0, py); ctx.lineTo(x1, py); ctx.stroke();
        }
      });
      ctx.restore();
    };
    const lo = Math.min(...pts.map(p => p[2]), ...S.map(s => -(s.tol || 0))), hi = Math.max(...pts.map(p => p[2]), 0);
    const pad = Math.max(0.01, (hi - lo) * 0.15);
    new uPlot({ width: width(t), height: 250, hooks: { draw: [mark] },
      scales: { x: { time: false, range: [0.5, S.length + 0.5] }, y: { range: [lo - pad, hi + pad] } },
      series: [{ label: "scenario", value: (u, x) => x == null ? "-" : (S[Math.round(x) - 1] || {}).scenario || "" },
        Object.assign(dots(`${S[0].names[0]} launches`, "#98a2b3"), { value: (u, y) => y == null ? "-" : pct(y) }),
        Object.assign(dots(S[0].names[1] === "today" ? "today's launches" : `${S[0].names[1]} launches`, COLORS[0]),
          { value: (u, y) => y == null ? "-" : pct(y) })],
      axes: [{ splits: () => S.map((_, i) => i + 1), size: 46,
               values: (u, xs) => xs.map(x => { const s = S[x - 1]; return s ? `${s.scenario}\n${num(s.value)} tok/s` : ""; }) },
             { label: "change from the reference", size: 70, values: (u, ys) => ys.map(y => pct(y)) }] }, data, t);
  }
  function cdf(t, dists, key, unit) {
    const rows = dists.filter(d => d[key] && d[key][0].length);
    const parts = [], series = [{ label: unit }];
    rows.forEach((d, i) => {
      const color = COLORS[i % COLORS.length];
      parts.push(d[key]); series.push(line(d.scenario, color));
      const ref = d["ref_" + key];
      if (ref && ref[0].length) { parts.push(ref); series.push(line(d.scenario + " (reference)", color + "99", { dash: [6, 4], width: 1.5 })); }
    });
    const data = uPlot.join(parts);
    new uPlot({ width: width(t), height: 230, scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
      series, axes: [{ label: unit + " (log scale)" }, { label: "fraction ≤ x" }] }, data, t);
  }
  function telemetry(t, tel, field, label) {
    const gpus = tel.gpus.map(String);
    const data = uPlot.join(gpus.map(g => [tel.series[g].t, tel.series[g][field]]));
    new uPlot({ width: width(t), height: 200, scales: { x: { time: false } },
      series: [{ label: "s" }, ...gpus.map((g, i) => line("GPU " + g, COLORS[i % COLORS.length], { width: 1 }))],
      axes: [{ label: "seconds into the run" }, { label, size: 60 }] }, data, t);
  }
  const runs = (D.history && D.history.runs) || [];
  function history(t, s) {
    const xs = s.values.map((_, i) => i + 1);
    const series = [{ label: "run", value: (u, x) => x == null ? "-" : `${x}: ${(runs[x - 1] || {}).commit || ""}` },
      line(s.m, COLORS[0], { points: { show: true, size: 4 } })];
    const data = [xs, s.values];
    if (s.bound != null) { series.push(line("bound", "#98a2b3", { width: 1, dash: [4, 4] })); data.push(xs.map(() => s.bound)); }
    if (s.target != null) { series.push(line("target", COLORS[2], { width: 1, dash: [8, 4] })); data.push(xs.map(() => s.target)); }
    const mark = u => {
      const ctx = u.ctx;
      ctx.save();
      for (const st of s.steps) {
        const x = u.valToPos(st.at + 0.5, "x", true);
        ctx.strokeStyle = st.worse ? "#d92d20" : "#067647";
        ctx.lineWidth = 2 * devicePixelRatio;
        ctx.setLineDash([6, 4]);
        ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        ctx.fillStyle = ctx.strokeStyle;
        ctx.font = `${12 * devicePixelRatio}px system-ui`;
        ctx.fillText(pct(st.change), x + 4 * devicePixelRatio, u.bbox.top + 14 * devicePixelRatio);
      }
      ctx.restore();
    };
    new uPlot({ width: width(t), height: 190, scales: { x: { time: false } }, series, hooks: { draw: [mark] },
      axes: [{ label: "run", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500] }, { label: s.u, size: 70 }] }, data, t);
  }

  // --- the serving frontier: output tok/s per GPU against tok/s per user, every config on one chart a workload
  function frontierChart(t, f) {
    const names = [...new Set(f.points.map(p => p.config))];
    const sorted = ps => [...ps].sort((a, b) => a.per_user - b.per_user);
    const parts = names.map(n => { const ps = sorted(f.points.filter(p => p.config === n)); return [ps.map(p => p.per_user), ps.map(p => p.per_gpu)]; });
    const edge = sorted(f.frontier);
    parts.push([edge.map(p => p.per_user), edge.map(p => p.per_gpu)]);
    const series = [{ label: "tok/s per user" }, ...names.map((n, i) => {
      const spec = f.points.some(p => p.config === n && p.speculative);
      return dots(n + (spec ? " (speculative)" : ""), COLORS[i % COLORS.length]);
    }), line("frontier", "#344054", { dash: [6, 4], width: 1.5 })];
    new uPlot({ width: width(t), height: 280, scales: { x: { time: false, distr: 3 }, y: { distr: 3 } }, series,
      axes: [{ label: "tok/s per user (1000 / mean TPOT, log scale)" }, { label: "output tok/s per GPU (log scale)", size: 70 }] },
      uPlot.join(parts), t);
  }
  if (D.frontier && D.frontier.length) {
    const fr = el("section", { id: "frontier" }, el("h2", { text: "Serving frontier" }));
    const fg = el("div", { class: "grid" });
    fr.append(fg);
    document.getElementById("verdicts").after(fr);
    for (const f of D.frontier) {
      const best = f.frontier.map(p => `${p.config} c${p.concurrency}`).join(", ");
      chart(fg, `${f.workload}: output tok/s per GPU against tok/s per user; frontier ${best}`, t => frontierChart(t, f), true);
    }
  }

  const hist = (D.history && D.history.series) || [];
  const root = document.getElementById("configs");
  for (const c of D.configs) {
    const sec = el("section", { id: "config-" + c.name });
    const how = c.server && c.server.how ? `${c.server.how}${c.server.why ? " (" + c.server.why + ")" : ""}` : "";
    sec.append(el("div", { class: "config-head" }, el("h2", { text: c.name }), el("span", { class: "how", text: how })));
    if (c.crash) {
      const box = el("div", { class: "crash" + (c.crash.known ? " known" : "") },
        el("strong", { text: c.crash.known ? "Crashed: a known issue (expected) · " + c.crash.known : "Crashed or could not run" }),
        el("div", { text: c.crash.why }),
        el("div", { class: "note", text: [c.crash.exit != null && "exit status " + c.crash.exit, c.crash.log && "log " + c.crash.log].filter(Boolean).join(" · ") }));
      if (c.crash.tail && c.crash.tail.length) box.append(el("pre", { text: c.crash.tail.join("\n") }));
      sec.append(box);
    }
    const grid = el("div", { class: "grid" });
    sec.append(grid);
    // Against concurrency only where there is a sweep: one concurrency is one dot on a log axis, and its strip says more.
    if (c.sweep.length > 1) chart(grid, "Output throughput against concurrency: baseline band, today's launches", t => throughput(t, c));
    const pair = c.strips && c.strips.length ? c.strips[0].names : null;
    if (pair) chart(grid, pair[1] === "today" ? "Output throughput per scenario: reference launches (left) and today's (right), change from the reference"
      : `Output throughput per scenario: ${pair[0]} (left) and ${pair[1]} (right), change from ${pair[0]}`, t => strips(t, c),
      c.strips.length > 3);
    if (c.dists.length) {
      const ref = c.dists.some(d => d.ref_ttft || d.ref_itl) ? ", dashed: the reference's" : ", no reference recorded";
      chart(grid, `TTFT distribution per scenario (CDF${ref})`, t => cdf(t, c.dists, "ttft", "TTFT ms"));
      chart(grid, `ITL distribution per scenario (CDF${ref})`, t => cdf(t, c.dists, "itl", "ITL ms"));
    }
    if (c.energy && c.energy.length) {
      // What the box costs, beside what it serves: tokens per joule and the GPUs' draw against their limit.
      sec.insertBefore(el("ul", { class: "energy" }, ...c.energy.map(x => el("li", { text: x }))), grid);
    }
    if (c.telemetry) {
      chart(grid, "GPU power (W)", t => telemetry(t, c.telemetry, "power", "W"));
      chart(grid, "GPU memory used (GB)", t => telemetry(t, c.telemetry, "mem", "GB"));
      chart(grid, "SM clock (MHz)", t => telemetry(t, c.telemetry, "clock", "MHz"));
    } else if (c.sweep.length) {
      grid.append(el("div", { class: "note", text: "No GPU telemetry in this run (NVML not available)." }));
    }
    const mine = hist.filter(s => s.c === c.name);
    if (mine.length) {
      const withSteps = mine.filter(s => s.steps.length);
      const det = el("details", withSteps.length ? { open: "" } : {},
        el("summary", { text: `History of ${mine.length} gated metrics over ${runs.length} runs` +
          (withSteps.length ? ` · change points in ${withSteps.length}` : " · no change point") }));
      const hg = el("div", { class: "grid" });
      det.append(hg);
      sec.append(det);
      for (const s of [...withSteps, ...mine.filter(s => !s.steps.length)]) {
        const st = s.steps.map(x => `${pct(x.change)} at run ${x.at + 1} (${x.commit || "?"})`).join(", ");
        const vals = s.values.filter(v => v != null);
        const last = vals.length > 1 ? ` · last run ${pct(vals[vals.length - 1] / vals[vals.length - 2] - 1)}` : "";
        chart(hg, `${s.s} ${s.m}${st ? " · change point " + st : ""}${last}`, t => history(t, s));
      }
    }
    root.append(sec);
  }
  if (D.history_note || (D.history && D.history.unavailable)) {
    root.append(el("p", { class: "note", text: [D.history_note, D.history.unavailable].filter(Boolean).join(" ") }));
  }
})();
