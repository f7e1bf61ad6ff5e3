// flashcheck report.html: draws the charts of a report from the JSON embedded in the page
// (#fc-data, written by reports/render_html.cpp) with uPlot. Every chart's container records what it
// drew (data-drawn, data-series, data-ink: saturated pixels on its canvas), which the html_render
// test reads from the DOM of a headless Chromium.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("fc-data").textContent);
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#e377c2", "#8c564b",
                   "#bcbd22", "#0b3d91", "#b8001f", "#006400"];
  const num = (x) => (typeof x === "number" && isFinite(x) ? x : null);
  const pos = (x) => { const v = num(x); return v !== null && v > 0 ? v : null; };
  const kernels = [...new Set(data.cells.map((c) => c.kernel))];
  const rank = (t) => { const i = ["F16", "BF16", "F32", "F64"].indexOf(t); return i < 0 ? 9 : i; };
  const dtypes = [...new Set(Object.values(data.cases).map((c) => c.dtype))].sort((a, b) => rank(a) - rank(b));
  // Tick labels: plain between 0.01 and 1000, otherwise 1e-4 style.
  const tick = (v) => {
    if (v === null || v === undefined) return "";
    if (v === 0) return "0";
    const e = Math.log10(Math.abs(v));
    return e >= -2 && e <= 3 ? String(+v.toPrecision(3)) : v.toExponential(0).replace("e+", "e");
  };
  const ticks = (u, splits) => splits.map(tick);
  const color = (k) => palette[kernels.indexOf(k) % palette.length];
  const root = document.getElementById("fc-charts");

  // Marks a chart's container once uPlot has drawn it: series count and saturated pixels.
  function mark(u) {
    const el = u.root.parentNode;
    const cv = u.ctx.canvas;
    const px = u.ctx.getImageData(0, 0, cv.width, cv.height).data;
    let ink = 0;
    for (let i = 0; i < px.length; i += 4) {
      const r = px[i], g = px[i + 1], b = px[i + 2], a = px[i + 3];
      if (a > 0 && Math.max(r, g, b) - Math.min(r, g, b) > 60) ink++;
    }
    el.dataset.drawn = "1";
    el.dataset.series = String(u.series.length - 1);
    el.dataset.ink = String(ink);
  }

  function section(title, note) {
    const s = document.createElement("section");
    const h = document.createElement("h2");
    h.textContent = title;
    s.appendChild(h);
    if (note) { const p = document.createElement("p"); p.className = "note"; p.textContent = note; s.appendChild(p); }
    const grid = document.createElement("div");
    grid.className = "fc-grid";
    s.appendChild(grid);
    root.appendChild(s);
    return grid;
  }

  // One uPlot chart: xs ascending, ys[k] aligned with xs (null: no point).
  function chart(grid, id, title, xs, series, opts) {
    if (!xs.length || !series.some((s) => s.ys.some((y) => y !== null))) return;
    const box = document.createElement("div");
    box.className = "fc-chart";
    box.dataset.chart = id;
    grid.appendChild(box);
    const u = new uPlot({
      title: title, width: 460, height: 280,
      scales: { x: Object.assign({ time: false }, opts.x || {}), y: opts.y || {} },
      axes: [Object.assign({ label: opts.xlabel, values: ticks }, opts.xaxis || {}),
             { label: opts.ylabel, size: 60, values: ticks }],
      legend: { live: false },
      series: [{ label: opts.xlabel }].concat(series.map((s) => Object.assign({
        label: s.label, stroke: s.color, width: 2, spanGaps: true, points: { show: true, size: 6 },
      }, s.extra || {}))),
      hooks: { draw: [mark] },
    }, [xs].concat(series.map((s) => s.ys)), box);
    return u;
  }

  const logx = { distr: 3, log: 2 }, logy = { distr: 3, log: 10 };
  const casesOf = (dt, regime) => Object.entries(data.cases).filter(([, c]) => c.dtype === dt && (!regime || c.regime === regime));
  const cellOf = (k, id) => data.cells.find((c) => c.kernel === k && c.case === id && c.t);

  // y over x for each kernel, the worst (max) per x when several cases share it.
  function lines(dt, regime, xOf, yOf, signed) {
    const cs = casesOf(dt, regime);
    const xs = [...new Set(cs.map(([, c]) => xOf(c)).filter((x) => x !== null))].sort((a, b) => a - b);
    const series = kernels.map((k) => ({
      label: k, color: color(k),
      ys: xs.map((x) => {
        let best = null;
        for (const [id, c] of cs) {
          if (xOf(c) !== x) continue;
          const cell = cellOf(k, id);
          const y = cell ? yOf(cell) : null;
          if (y !== null && (best === null || (signed ? Math.abs(y) > Math.abs(best) : y > best))) best = y;
        }
        return best;
      }),
    }));
    return { xs, series: series.filter((s) => s.ys.some((y) => y !== null)) };
  }

  const nOf = (c) => c.n_k;
  const o = (cell, key) => (cell.t.o ? cell.t.o[key] : null);

  let g = section("Error of o vs N (normal regime)",
    "RMSE of o against the certified reference (solid; the FlashAttention-3 paper's measure) and the max scaled error |Δo|/Σ P|v| (dashed), log-log.");
  for (const dt of dtypes) {
    const a = lines(dt, "normal", nOf, (c) => pos(o(c, "rmse")));
    const b = lines(dt, "normal", nOf, (c) => pos(o(c, "max_scaled")));
    b.series.forEach((s) => { s.label += " (max scaled)"; s.extra = { dash: [6, 4] }; });
    chart(g, "error-vs-n-" + dt, dt + ": o error vs N", a.xs, a.series.concat(b.series),
          { x: logx, y: logy, xlabel: "N (keys)", ylabel: "error" });
  }

  g = section("Error of o vs score magnitude (scores regime)", "Max scaled error of o against max |s_ij| of the case.");
  for (const dt of dtypes) {
    const a = lines(dt, "scores", (c) => pos(c.score_max), (c) => pos(o(c, "max_scaled")));
    chart(g, "error-vs-score-" + dt, dt + ": o error vs max |s|", a.xs, a.series,
          { x: { distr: 3, log: 10 }, y: logy, xlabel: "max |s|", ylabel: "max scaled error" });
  }

  // Histograms summed over every cell and tensor of a kernel and dtype, as fractions of elements.
  function hist(dt, key, nbins) {
    return kernels.map((k) => {
      const h = new Array(nbins).fill(0);
      for (const cell of data.cells) {
        if (cell.kernel !== k || !cell.t || data.cases[cell.case].dtype !== dt) continue;
        for (const t of Object.values(cell.t)) if (t[key]) t[key].forEach((v, i) => { h[i] += v; });
      }
      const total = h.reduce((a, b) => a + b, 0);
      return { label: k, color: color(k), ys: h.map((v) => (total > 0 && v > 0 ? v / total : null)) };
    }).filter((s) => s.ys.some((y) => y !== null));
  }

  g = section("Measured error / bound", "Fraction of elements per bin of |error| / bound (every tensor); a correct kernel stays left of 1.");
  const rx = data.ratio_edges.concat([2 * data.ratio_edges[data.ratio_edges.length - 1]]);
  for (const dt of dtypes)
    chart(g, "ratio-" + dt, dt + ": error / bound", rx, hist(dt, "ratio_hist", rx.length),
          { x: { distr: 3, log: 10 }, y: logy, xlabel: "error / bound (bin upper edge)", ylabel: "fraction" });

  g = section("ULP histogram", "Distance from the correctly rounded result, in steps of the output type (every tensor).");
  const ux = data.ulp_labels.map((_, i) => i);
  for (const dt of dtypes)
    chart(g, "ulp-" + dt, dt + ": steps from correctly rounded", ux, hist(dt, "ulp_hist", ux.length).map((s) =>
      Object.assign(s, { extra: { paths: uPlot.paths.bars({ size: [0.8 / Math.max(1, kernels.length), 40] }) } })),
      { y: logy, xlabel: "steps", ylabel: "fraction", xaxis: { values: (u, splits) => splits.map((i) => data.ulp_labels[i] || "") } });

  // The worst measured/bound of each regime (every tensor of every cell), one bar per kernel: the
  // variants' regimes beside the dense ones. A kernel without a regime's variant has no bar there.
  g = section("Measured error / bound by regime", "Largest |error| / bound over the regime's cells and tensors (≤ 1 passes); no dot: the kernel does not declare the regime's variant.");
  const rgx = data.regimes.map((_, i) => i);
  for (const dt of dtypes) {
    const series = kernels.map((k) => ({
      label: k, color: color(k),
      ys: data.regimes.map((rg) => {
        let worst = null;
        for (const [id] of casesOf(dt, rg)) {
          const cell = cellOf(k, id);
          if (!cell) continue;
          for (const t of Object.values(cell.t)) {
            const y = pos(t.ratio_max);
            if (y !== null && (worst === null || y > worst)) worst = y;
          }
        }
        return worst;
      }),
      extra: { paths: () => null, points: { show: true, size: 10, fill: color(k) } },  // a dot per regime
    })).filter((s) => s.ys.some((y) => y !== null));
    chart(g, "regime-" + dt, dt + ": worst error / bound per regime", rgx, series,
          { x: { range: [-0.5, rgx.length - 0.5] }, y: logy, xlabel: "regime", ylabel: "max error / bound",
            xaxis: { splits: () => rgx, rotate: -45, size: 125, values: (u, splits) => splits.map((i) => data.regimes[i] || "") } });
  }

  // Bias where o keeps its sign if the sweep has such a regime (the accumulation audit's positive_v),
  // else in the normal regime.
  const biasRegime = Object.values(data.cases).some((c) => c.regime === "positive_v") ? "positive_v" : "normal";
  g = section("Signed error (bias) of o vs N (" + biasRegime + " regime)",
    "Mean of sign(ref)·(o − ref) over the RMSE, in [−1, 1]: 0 for unbiased rounding, below 0 when results shrink toward zero (truncation); about ±1/√(elements) is noise.");
  for (const dt of dtypes) {
    const a = lines(dt, biasRegime, nOf, (c) => num(o(c, "bias_rel")), true);
    chart(g, "bias-vs-n-" + dt, dt + ": bias of o vs N", a.xs, a.series, { x: logx, xlabel: "N (keys)", ylabel: "bias / RMSE" });
  }
  document.body.dataset.charts = String(document.querySelectorAll(".fc-chart").length);
})();
