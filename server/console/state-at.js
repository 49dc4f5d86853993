// "State at": every queue of the group as it was at a time (GET /v1/state?at&group: committed
// offset and generation; GET /v1/groups/{g}/lag?at: MaxOffset, lag, time lag and status then)
// beside the same queue now (the queues table's progress rows); changed rows highlighted.
"use strict";

function stateAt(page, target) {
  const { h } = OL;
  const at = h("input", { id: "state-at", type: "datetime-local", step: 1, required: true });
  at.value = OL.toLocalInput(Date.now() - 3600e3);
  const go = h("button", { type: "submit", id: "state-show" }, "Show");
  const form = h("form", { class: "controls" }, h("label", null, "at (UTC) ", at), go);
  const out = h("div", { id: "state-rows" });
  target.replaceChildren(form, out);

  const cell = (then, now, fmt = OL.num) => (then === now ? fmt(now) : `${fmt(then)} → ${fmt(now)}`);

  async function show() {
    const when = OL.fromLocalInput(at.value);
    const [state, lag] = await Promise.all([
      OL.api("GET", "/v1/state", { query: { at: when, group: page.group } }),
      OL.api("GET", OL.groupPath(page.group, "lag"), { query: { at: when } })]);
    const key = (r) => `${r.topic}:${r.queue_id}`;
    const then = new Map(state.map((r) => [key(r), r]));
    const thenLag = new Map(lag.queues.map((q) => [key(q), q]));
    const keys = [...new Set([...then.keys(), ...page.progress.map(key)])].sort();
    const nowRows = new Map(page.progress.map((r) => [key(r), r]));
    const rows = keys.map((k) => {
      const t = then.get(k) || {};
      const tl = thenLag.get(k) || {};
      const n = nowRows.get(k) || {};
      const [topic, queue] = k.split(/:(?=\d+$)/);
      return { key: k, topic, queue, then: t, thenLag: tl, now: n,
        changed: (t.committed_offset ?? null) !== (n.committed_offset ?? null) };
    });
    const columns = [
      { label: "topic", key: "topic" },
      { label: "queue", key: "queue", num: true },
      { label: "committed then → now", num: true, render: (r) => cell(r.then.committed_offset ?? null, r.now.committed_offset ?? null) },
      { label: "generation then → now", num: true, render: (r) => cell(r.then.generation ?? null, r.now.generation ?? null) },
      { label: "lag then → now", num: true, render: (r) => cell(r.thenLag.lag ?? null, r.now.lag ?? null) },
      { label: "time lag then → now", num: true, render: (r) => cell(r.thenLag.lag_ms ?? null, r.now.lag_ms ?? null, OL.duration) },
      { label: "status then → now", render: (r) => h("span", null, r.thenLag.status ? OL.status(r.thenLag.status) : "–",
        " → ", r.now.status ? OL.status(r.now.status) : "–") },
    ];
    out.replaceChildren(h("p", { class: "note" }, `${OL.time(when)} (then) beside now; `
      + `${rows.filter((r) => r.changed).length} of ${rows.length} queues moved since.`),
    OL.table(columns, rows, (r) => ({ class: r.changed ? "changed" : null, dataset: { queue: r.key } })));
  }

  form.addEventListener("submit", (ev) => { ev.preventDefault(); show().catch((e) => OL.showError(out, e)); });
  return {};
}
