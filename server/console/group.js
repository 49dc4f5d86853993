// A group's page: its queues now (GET /v1/groups/{g}/progress, with each queue's status from
// GET /v1/groups/{g}/lag), then the sections of lag-chart.js, reset.js, state-at.js and
// history.js, each rendering its own /v1 answers; a reset refreshes the ones it changes.
"use strict";

const QUEUE_COLUMNS = [
  { label: "topic", key: "topic" },
  { label: "queue", key: "queue_id", num: true },
  { label: "status", render: (r) => (r.status ? OL.status(r.status) : "–") },
  { label: "committed", num: true, render: (r) => OL.num(r.committed_offset) },
  { label: "MaxOffset", num: true, render: (r) => OL.num(r.max_offset) },
  { label: "lag", num: true, render: (r) => OL.num(r.lag) },
  { label: "time lag", num: true, render: (r) => OL.duration(r.lag_ms) },
  { label: "inflight", num: true, render: (r) => OL.num(r.inflight) },
  { label: "ready", num: true, render: (r) => OL.num(r.ready) },
  { label: "generation", key: "generation", num: true },
  { label: "last client", key: "last_client" },
  { label: "last update", render: (r) => OL.time(r.last_update) },
];

OL.start(async (me) => {
  const { h } = OL;
  const group = new URLSearchParams(location.search).get("group");
  if (!group) throw new Error("no group named: open /console/group.html?group=NAME");
  document.title = `${group} · offset-ledger`;
  const page = { me, group, progress: [], refresh: null };

  async function loadQueues() {
    const [progress, lag] = await Promise.all([
      OL.api("GET", OL.groupPath(group, "progress")),
      OL.api("GET", OL.groupPath(group, "lag"))]);
    const statusOf = new Map(lag.queues.map((q) => [`${q.topic}:${q.queue_id}`, q.status]));
    page.progress = progress.map((r) => ({ ...r, status: statusOf.get(`${r.topic}:${r.queue_id}`) }));
    document.getElementById("title").replaceChildren(`Group ${group} `, OL.status(lag.status));
    document.getElementById("summary").textContent = `${progress.length} queues · total lag ${OL.num(lag.total_lag)}`
      + ` · max time lag ${OL.duration(Math.max(0, ...progress.map((r) => r.lag_ms || 0)))}`
      + ` · ${Math.round(lag.complete * 100)}% of queues with a full window`;
    const target = document.getElementById("queues");
    target.replaceChildren(progress.length ? OL.table(QUEUE_COLUMNS, page.progress,
      (r) => ({ dataset: { queue: `${r.topic}:${r.queue_id}` } })) : h("p", { class: "note" }, "no offsets"));
  }

  const sections = [];
  page.refresh = async () => {
    await loadQueues();
    await Promise.all(sections.map((s) => s.refresh && s.refresh()));
  };
  try {
    await loadQueues();
  } catch (e) {
    OL.showError(document.getElementById("queues"), e);
  }
  sections.push(await lagChart(page, document.getElementById("chart-section")));
  if (OL.can(me, "operate")) {
    document.getElementById("reset-section").hidden = false;
    sections.push(resetForm(page, document.getElementById("reset")));
  }
  sections.push(stateAt(page, document.getElementById("state")));
  sections.push(await history(page, document.getElementById("history")));
});
