// The charts of the console and of the audit report (`audit --report` inlines this file and
// uPlot, so both draw alike): a lag chart with resets marked on it, a sparkline, a reset
// timeline. Times come in epoch ms; uPlot's time axis takes seconds.
"use strict";

const OLCharts = (() => {
  const COLORS = { lag: "#1f5fa8", lagMs: "#d9822b", replay: "#c0392b", skip: "#2471a3", other: "#777777" };
  const sec = (ms) => ms / 1000;
  const compact = (v) => (v === null || v === undefined ? "–" : Math.abs(v) >= 1e6 ? (v / 1e6).toFixed(1) + "M"
    : Math.abs(v) >= 1e4 ? (v / 1e3).toFixed(0) + "k" : String(Math.round(v)));

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /** An x range [ms, ms] never narrower than `minMs` (one point, or one reset, gets a frame
   * around it instead of uPlot's default of years). */
  function padded(lo, hi, minMs) {
    if (hi - lo >= minMs) return [lo, hi];
    const mid = (lo + hi) / 2;
    return [mid - minMs / 2, mid + minMs / 2];
  }

  /** Resets drawn as markers over the plot: a line at each reset's time; hovering one shows
   * who, why, and every queue's from -> to. `resets`: [{ts, actor, reason, mode, moves: [text]}]. */
  function resetMarkers(resets) {
    let layer;
    let tip;
    const show = (r, left) => {
      tip.replaceChildren(el("strong", null, r.actor ? `reset by ${r.actor}` : "reset (no actor recorded)"),
        el("div", null, r.reason ? `reason: ${r.reason}` : "no reason given"),
        el("div", "dim", `${new Date(r.ts).toISOString()}${r.mode ? " · " + r.mode : ""}`),
        ...r.moves.map((m) => el("div", "move", m)));
      const width = layer.clientWidth;
      const onRight = left > width * 0.6; // near the right edge: open towards the left
      tip.style.left = onRight ? "" : `${Math.max(0, left - 10)}px`;
      tip.style.right = onRight ? `${Math.max(0, width - left - 10)}px` : "";
      tip.hidden = false;
    };
    return {
      hooks: {
        init: (u) => {
          layer = el("div", "reset-layer");
          tip = el("div", "reset-tip");
          tip.hidden = true;
          for (const r of resets) {
            const m = el("div", "reset-marker");
            m.dataset.ts = r.ts;
            m.dataset.actor = r.actor || "";
            m.addEventListener("mouseenter", () => show(r, parseFloat(m.style.left)));
            m.addEventListener("mouseleave", () => { tip.hidden = true; });
            layer.append(m);
          }
          u.over.append(layer, tip);
        },
        draw: (u) => {
          const width = u.over.clientWidth;
          resets.forEach((r, i) => {
            const m = layer.children[i];
            const left = u.valToPos(sec(r.ts), "x");
            m.hidden = !(left >= 0 && left <= width);
            m.style.left = `${left}px`;
          });
        },
      },
    };
  }

  /** Lag over time: `x` (ms), `series` [{label, values, scale: "msgs"|"s", color}], `resets`
   * marked on it; `xRange` [ms, ms] fixes the time axis (the range asked for, not the data's). */
  function lag(target, { x, series, resets = [], xRange, width, height = 260, stepped = true }) {
    const few = x.length < 3;
    const scales = { x: { time: true } };
    const range = xRange || (x.length ? [x[0], x[x.length - 1]] : [Date.now() - 3600e3, Date.now()]);
    const [lo, hi] = padded(range[0], range[1], 120e3);
    scales.x.range = () => [sec(lo), sec(hi)];
    const scaleKeys = [...new Set(series.map((s) => s.scale))];
    for (const k of scaleKeys) scales[k] = { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] };
    const axes = [{ stroke: "#555" }];
    scaleKeys.forEach((k, i) => {
      axes.push({
        scale: k, side: i === 0 ? 3 : 1, grid: { show: i === 0 }, size: 60, stroke: "#555",
        label: k === "s" ? "time lag (s)" : "lag (messages)",
        values: (u, vals) => vals.map(compact),
      });
    });
    const opts = {
      width: width || target.clientWidth || 800, height, scales, axes,
      series: [{ value: (u, v) => (v === null ? "–" : new Date(v * 1000).toISOString().replace(".000Z", "Z")) },
        ...series.map((s) => ({
          label: s.label, scale: s.scale, stroke: s.color, width: 1.5, spanGaps: false,
          fill: s.scale === "msgs" ? s.color + "22" : undefined,
          paths: stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
          // points always: a step line draws nothing after its last point (a reset just now)
          points: { show: true, size: few ? 7 : 3, fill: s.color },
          value: (u, v) => (v === null ? "–" : s.scale === "s" ? v.toFixed(1) + " s" : Math.round(v).toLocaleString("en-US")),
        }))],
      plugins: [resetMarkers(resets)],
    };
    const data = [x.map(sec), ...series.map((s) => s.values)];
    const u = new uPlot(opts, data, target);
    target.dataset.points = String(x.length);
    target.dataset.resets = String(resets.length);
    target.dataset.range = `${lo},${hi}`; // the time axis drawn, ms
    return u;
  }

  /** A sparkline of [[ms, value], ...]: a line, no axes, no legend. */
  function spark(target, points, { width = 140, height = 30, color = COLORS.lag } = {}) {
    const xs = points.map((p) => sec(p[0]));
    const ys = points.map((p) => p[1]);
    const lo = xs.length ? xs[0] : 0;
    const hi = xs.length ? xs[xs.length - 1] : 1;
    const opts = {
      width, height, legend: { show: false }, cursor: { show: false }, select: { show: false },
      axes: [{ show: false }, { show: false }],
      scales: { x: { time: false, range: () => (hi > lo ? [lo, hi] : [lo - 1, hi + 1]) },
        y: { range: (u, min, max) => [0, max > 0 ? max * 1.05 : 1] } },
      series: [{}, { stroke: color, width: 1.25, fill: color + "22",
        points: { show: xs.length < 2, size: 5, fill: color } }],
    };
    target.dataset.points = String(xs.length);
    return new uPlot(opts, [xs, ys], target);
  }

  /** Resets on a time line, one row per group: red moved back (messages replayed), blue moved
   * forward (skipped), grey neither or refused. `resets`: [{ts, group, kind, title}]. */
  function timeline(target, { groups, resets, xRange, width }) {
    const kinds = [["replay", "moved back (replays)"], ["skip", "moved forward (skips)"], ["other", "no move or refused"]];
    const row = new Map(groups.map((g, i) => [g, i]));
    const xs = [...new Set(resets.map((r) => r.ts))].sort((a, b) => a - b);
    const at = new Map(xs.map((t, i) => [t, i]));
    const ys = kinds.map(() => xs.map(() => null));
    const titles = xs.map(() => []);
    for (const r of resets) {
      const k = kinds.findIndex(([name]) => name === r.kind);
      ys[k][at.get(r.ts)] = row.get(r.group);
      titles[at.get(r.ts)].push(r.title);
    }
    const [lo, hi] = padded(xRange[0], xRange[1], 120e3);
    const tip = el("div", "reset-tip");
    tip.hidden = true;
    const opts = {
      width: width || target.clientWidth || 900, height: 60 + 26 * groups.length,
      legend: { show: true, live: false },
      scales: { x: { time: true, range: () => [sec(lo), sec(hi)] },
        y: { range: () => [-0.5, groups.length - 0.5] } },
      axes: [{ stroke: "#555" }, {
        stroke: "#555", size: 140, splits: () => groups.map((g, i) => i),
        values: (u, vals) => vals.map((v) => groups[v] || ""),
      }],
      series: [{}, ...kinds.map(([name, label]) => ({
        label, stroke: COLORS[name], fill: COLORS[name], paths: () => null,
        points: { show: true, size: 10, fill: COLORS[name], stroke: COLORS[name] },
      }))],
      hooks: {
        init: [(u) => u.over.append(tip)],
        setCursor: [(u) => {
          const i = u.cursor.idx;
          if (i === null || i === undefined || !titles[i]) { tip.hidden = true; return; }
          tip.replaceChildren(...titles[i].map((t) => el("div", null, t)));
          tip.style.left = `${Math.max(0, u.cursor.left - 10)}px`;
          tip.hidden = false;
        }],
      },
    };
    target.dataset.points = String(resets.length);
    target.dataset.range = `${lo},${hi}`; // the time axis drawn, ms
    return new uPlot(opts, [xs.map(sec), ...ys], target);
  }

  return { lag, spark, timeline, padded, COLORS };
})();
