// The groups page: GET /v1/lag (every group's lag health, summed up) and GET /v1/groups (every
// group, also those without offsets), merged; unhealthy first; filtered by name as you type;
// sparklines drawn by uPlot as their rows come into view (200 charts at once would cost more
// than the rest of the page).
"use strict";

OL.start(async (me) => {
  const { h } = OL;
  const target = document.getElementById("groups");
  if (!OL.can(me, "audit")) {
    const input = h("input", { id: "open-group", placeholder: "group name", required: true });
    const form = h("form", { class: "controls" }, h("label", null, "Open a group ", input),
      h("button", { type: "submit" }, "Open"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      location.href = `/console/group.html?group=${encodeURIComponent(input.value.trim())}`;
    });
    target.replaceChildren(h("p", { class: "note" },
      `Listing every group needs the audit role; ${me.name} may read the groups ${me.groups.join(", ")}.`), form);
    return;
  }
  const [health, groups] = await Promise.all([OL.api("GET", "/v1/lag"), OL.api("GET", "/v1/groups")]);
  const byName = new Map(health.map((g) => [g.consumer_group, g]));
  const rows = groups.map((g) => ({ mode: g.mode, status: "NOTFOUND", total_lag: null, max_lag_ms: null,
    last_commit_ms: null, commit_lag: [], ...byName.get(g.consumer_group), consumer_group: g.consumer_group,
    queues: g.queues }));
  rows.sort((a, b) => (OL.SEVERITY[b.status] - OL.SEVERITY[a.status])
    || ((b.total_lag || 0) - (a.total_lag || 0)) || a.consumer_group.localeCompare(b.consumer_group));

  const sparks = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      const cell = entry.target;
      sparks.unobserve(cell);
      OLCharts.spark(cell, byName.get(cell.dataset.group)?.commit_lag || []);
    }
    if (!performance.getEntriesByName("ol-sparks").length) performance.mark("ol-sparks");
  });
  const link = (g) => h("a", { href: `/console/group.html?group=${encodeURIComponent(g)}` }, g);
  const columns = [
    { label: "group", render: (r) => link(r.consumer_group) },
    { label: "status", render: (r) => OL.status(r.status) },
    { label: "mode", key: "mode" },
    { label: "queues", key: "queues", num: true },
    { label: "total lag", num: true, render: (r) => OL.num(r.total_lag) },
    { label: "max time lag", num: true, render: (r) => OL.duration(r.max_lag_ms) },
    { label: "last commit", render: (r) => OL.time(r.last_commit_ms) },
    { label: "lag at last commits", render: (r) => h("div", { class: "spark", dataset: { group: r.consumer_group } }) },
  ];
  const tableEl = OL.table(columns, rows, (r) => ({ dataset: { group: r.consumer_group, status: r.status } }));
  target.replaceChildren(tableEl);
  tableEl.querySelectorAll("div.spark").forEach((cell) => sparks.observe(cell));

  const filter = document.getElementById("filter");
  const count = document.getElementById("count");
  const apply = () => {
    const needle = filter.value.trim().toLowerCase();
    let shown = 0;
    for (const tr of tableEl.tBodies[0].rows) {
      tr.hidden = needle !== "" && !tr.dataset.group.toLowerCase().includes(needle);
      if (!tr.hidden) shown += 1;
    }
    count.textContent = `${shown} of ${rows.length} groups`;
  };
  filter.addEventListener("input", apply);
  apply();
});
