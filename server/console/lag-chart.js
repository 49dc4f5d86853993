// A group's lag over time: GET /v1/groups/{g}/lag/series (every queue's lag and time lag at
// each step of the range) summed per step (messages) and maxed (seconds), with the group's
// resets (GET /v1/history?kind=reset) marked on it; a range picker of span and end.
"use strict";

const SPANS = [["15 min", 15 * 60e3], ["1 h", 3600e3], ["3 h", 3 * 3600e3], ["6 h", 6 * 3600e3],
  ["24 h", 24 * 3600e3], ["7 d", 7 * 86400e3]];
const CHART_POINTS = 150;

/** Resets of one operator action (same time, actor and detail) as one marker: who, why, moves. */
function resetMarks(events) {
  const marks = new Map();
  for (const e of events) {
    const key = `${e.ts_ms}|${e.actor}|${e.detail}`;
    if (!marks.has(key)) {
      let detail = {};
      try { detail = JSON.parse(e.detail || "{}"); } catch (err) { detail = { reason: e.detail }; }
      marks.set(key, { ts: e.ts_ms, actor: e.actor, reason: detail.reason, mode: detail.mode, moves: [] });
    }
    marks.get(key).moves.push(`${e.topic}:${e.queue_id} ${e.prev_offset ?? "none"} -> ${e.offset}`);
  }
  return [...marks.values()];
}

/** Per step: total lag over the queues that had an offset then, and the highest time lag. */
function sumSeries(doc) {
  const steps = new Map();
  for (const q of doc) {
    for (const p of q.series) {
      const s = steps.get(p.ts) || { lag: null, lagMs: null };
      if (p.lag !== null) s.lag = (s.lag || 0) + p.lag;
      if (p.lag_ms !== null) s.lagMs = Math.max(s.lagMs || 0, p.lag_ms);
      steps.set(p.ts, s);
    }
  }
  const x = [...steps.keys()].sort((a, b) => a - b);
  return { x, lag: x.map((t) => steps.get(t).lag), lagS: x.map((t) => (steps.get(t).lagMs === null ? null : steps.get(t).lagMs / 1000)) };
}

async function lagChart(page, section) {
  const { h } = OL;
  const span = h("select", { id: "chart-span" }, SPANS.map(([label, ms]) => h("option", { value: ms }, label)));
  span.value = String(3 * 3600e3);
  const end = h("input", { id: "chart-end", type: "datetime-local", step: 1 });
  // A ledger that stopped long ago (an import, a benchmark) is shown up to its last update.
  const last = Math.max(0, ...page.progress.map((r) => Date.parse(r.last_update) || 0));
  let followNow = !(last && last < Date.now() - 24 * 3600e3); // the range ends now, also after a reset
  end.value = OL.toLocalInput(followNow ? Date.now() : last + 60e3);
  end.addEventListener("change", () => { followNow = false; });
  const draw = h("button", { type: "button", id: "chart-draw" }, "Draw");
  section.querySelector("#chart-controls").replaceChildren(h("label", null, "Last ", span),
    h("label", null, "ending at (UTC) ", end), draw);
  const target = section.querySelector("#chart");
  const note = section.querySelector("#chart-note");
  let chart = null;

  async function refresh() {
    const until = followNow ? Date.now() : OL.fromLocalInput(end.value) || Date.now();
    if (followNow) end.value = OL.toLocalInput(until);
    const every = Math.max(1000, Math.ceil(Number(span.value) / CHART_POINTS / 1000) * 1000);
    const since = until - every * Math.ceil(Number(span.value) / every); // `until` is a step too
    const canHistory = OL.can(page.me, "audit");
    const [series, resets] = await Promise.all([
      OL.api("GET", OL.groupPath(page.group, "lag", "series"), { query: { since, until, every } }),
      canHistory ? OL.api("GET", "/v1/history", { query: { group: page.group, kind: "reset", since, until } })
        : Promise.resolve([])]);
    const { x, lag, lagS } = sumSeries(series);
    if (chart) chart.destroy();
    target.replaceChildren();
    chart = OLCharts.lag(target, {
      // a little room after the end, so a reset made just now is not drawn on the axis
      x, xRange: [since, until + (until - since) / 50], resets: resetMarks(resets), width: Math.min(1200, section.clientWidth || 1000),
      series: [{ label: "lag (messages)", values: lag, scale: "msgs", color: OLCharts.COLORS.lag },
        { label: "time lag", values: lagS, scale: "s", color: OLCharts.COLORS.lagMs }],
    });
    note.textContent = `${x.length} points, one every ${OL.duration(every)}; lag summed over the queues, time lag`
      + ` the highest; ${resets.length ? `${resetMarks(resets).length} reset(s) marked (hover the R)`
        : canHistory ? "no resets in range" : "resets are marked for tokens with the audit role"}.`;
  }

  draw.addEventListener("click", () => refresh().catch((e) => OL.showError(note, e)));
  span.addEventListener("change", () => refresh().catch((e) => OL.showError(note, e)));
  try {
    await refresh();
  } catch (e) {
    OL.showError(note, e);
  }
  return { refresh };
}
