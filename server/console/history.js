// A group's history: GET /v1/history with the filters people ask with (kind, topic, queue,
// since, until), newest page first. Pages go back with `until` = the oldest time shown and a
// limit that covers the events already shown at that same millisecond (dropped by seq), so
// paging needs nothing the API does not already take.
"use strict";

const KINDS = ["commit", "pull", "reset", "reset_refused", "initial", "sync", "clamp", "expire",
  "delete", "group_config"];
const PAGE_SIZE = 50;

function historyColumns() {
  return [
    { label: "seq", key: "seq", num: true },
    { label: "time", render: (e) => OL.time(e.ts_ms) },
    { label: "kind", key: "kind" },
    { label: "topic", key: "topic" },
    { label: "queue", key: "queue_id", num: true },
    { label: "from → to", num: true, render: (e) => `${e.prev_offset ?? "–"} → ${e.offset ?? "–"}` },
    { label: "generation", key: "generation", num: true },
    { label: "client", key: "client_id" },
    { label: "actor", key: "actor" },
    { label: "detail", key: "detail" },
  ];
}

async function history(page, target) {
  const { h } = OL;
  const kind = h("select", { id: "history-kind" }, h("option", { value: "" }, "any kind"),
    KINDS.map((k) => h("option", { value: k }, k)));
  const topic = h("input", { id: "history-topic", size: 12, placeholder: "topic" });
  const queue = h("input", { id: "history-queue", size: 4, placeholder: "queue", inputmode: "numeric" });
  const since = h("input", { id: "history-since", type: "datetime-local", step: 1 });
  const until = h("input", { id: "history-until", type: "datetime-local", step: 1 });
  const apply = h("button", { type: "submit", id: "history-apply" }, "Filter");
  const newer = h("button", { type: "button", id: "history-newer", disabled: true }, "← newer");
  const older = h("button", { type: "button", id: "history-older", disabled: true }, "older →");
  const info = h("span", { class: "note", id: "history-info" });
  const form = h("form", { class: "controls", id: "history-filters" }, kind, topic, queue,
    h("label", null, "since ", since), h("label", null, "until ", until), apply);
  const rows = h("div", { id: "history-rows" });
  target.replaceChildren(form, h("div", { class: "controls" }, newer, older, info), rows);

  let pages = []; // the pages shown so far, newest first; the last is on screen

  const filters = () => ({
    group: page.group, kind: kind.value, topic: topic.value.trim(), queue_id: queue.value.trim(),
    since: OL.fromLocalInput(since.value), until: OL.fromLocalInput(until.value),
  });

  function show() {
    const events = pages[pages.length - 1];
    rows.replaceChildren(events.length ? OL.table(historyColumns(), events.slice().reverse(),
      (e) => ({ dataset: { seq: e.seq, kind: e.kind } })) : h("p", { class: "note" }, "no events match"));
    newer.disabled = pages.length < 2;
    older.disabled = events.length < PAGE_SIZE;
    info.textContent = events.length ? `page ${pages.length}: seq ${events[events.length - 1].seq} back to ${events[0].seq}` : "";
  }

  async function first() {
    pages = [await OL.api("GET", "/v1/history", { query: { ...filters(), limit: PAGE_SIZE } })];
    show();
  }

  async function next() {
    const shown = pages[pages.length - 1];
    const oldest = shown[0];
    const same = pages.flat().filter((e) => e.ts_ms === oldest.ts_ms).length;
    const got = await OL.api("GET", "/v1/history", {
      query: { ...filters(), until: oldest.ts_ms, limit: PAGE_SIZE + same } });
    pages.push(got.filter((e) => e.seq < oldest.seq).slice(-PAGE_SIZE));
    show();
  }

  const guard = (fn) => () => fn().catch((e) => OL.showError(rows, e));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); guard(first)(); });
  older.addEventListener("click", guard(next));
  newer.addEventListener("click", () => { pages.pop(); show(); });
  if (!OL.can(page.me, "audit")) {
    rows.replaceChildren(h("p", { class: "note" }, "Reading history needs the audit role."));
    form.hidden = true;
    return {};
  }
  await guard(first)();
  return { refresh: guard(first) };
}
