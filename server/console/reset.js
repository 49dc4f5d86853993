// Reset (operate role): scope and scenario as `offset-ledger reset` takes them, a dry run
// (POST /v1/groups/{g}/reset) shown as a plan table with the messages replayed and skipped,
// then the reviewed plan executed as it is (`plan` rows, the scenario, a required reason,
// `execute`): the server refuses it (409) when any of its queues moved since, and so do we.
"use strict";

const SCENARIOS = [
  ["to_datetime", "to a time (first message stored at or after it)", "time"],
  ["to_offset", "to an offset", "number"],
  ["shift_by", "shift by N (negative: back)", "number"],
  ["by_duration", "back by a duration (ISO-8601: PT1H)", "text"],
  ["to_earliest", "to the earliest offset", null],
  ["to_latest", "to the latest offset", null],
  ["to_current", "to the current offset", null],
  ["to_state_at", "to the group's own state at a time", "time"],
  ["from_file", "from a Kafka CSV (topic,partition,offset)", "csv"],
];

function resetForm(page, target) {
  const { h } = OL;
  const topics = h("input", { id: "reset-topics", size: 28, placeholder: "orders  or  orders:0,2" });
  const allTopics = h("input", { type: "checkbox", id: "reset-all-topics" });
  const scenario = h("select", { id: "reset-scenario" }, SCENARIOS.map(([v, label]) => h("option", { value: v }, label)));
  const time = h("input", { type: "datetime-local", step: 1, id: "reset-time" });
  time.value = OL.toLocalInput(Date.now() - 3600e3);
  const number = h("input", { type: "number", id: "reset-number", step: 1 });
  const text = h("input", { id: "reset-text", size: 10, placeholder: "PT1H" });
  const csv = h("textarea", { id: "reset-csv", rows: 4, placeholder: "orders,0,1500" });
  const backward = h("input", { type: "checkbox", id: "reset-backward" });
  const plan = h("button", { type: "submit", id: "reset-plan" }, "Plan (dry run)");
  const form = h("form", { id: "reset-form" },
    h("div", { class: "controls" }, h("label", null, "Topics ", topics), h("label", null, allTopics, "all topics of the group")),
    h("div", { class: "controls" }, h("label", null, "Scenario ", scenario), time, number, text,
      h("label", null, backward, "backward only")),
    csv, h("div", { class: "controls" }, plan));
  const out = h("div", { id: "reset-plan-out" });
  target.replaceChildren(form, out);

  const kindOf = () => SCENARIOS.find(([v]) => v === scenario.value)[2];
  const sync = () => {
    const kind = kindOf();
    time.hidden = kind !== "time";
    number.hidden = kind !== "number";
    text.hidden = kind !== "text";
    csv.hidden = kind !== "csv";
    topics.disabled = allTopics.checked || kind === "csv";
  };
  scenario.addEventListener("change", sync);
  allTopics.addEventListener("change", sync);
  sync();

  /** The scenario field as the API takes it (times as ISO-8601 UTC). */
  function scenarioField() {
    const name = scenario.value;
    const kind = kindOf();
    if (kind === "time") return { [name]: new Date(OL.fromLocalInput(time.value)).toISOString() };
    if (kind === "number") {
      if (number.value === "") throw new Error(`${name} needs a number`);
      return { [name]: Number(number.value) };
    }
    if (kind === "text") return { [name]: text.value.trim() };
    if (kind === "csv") return { from_csv: csv.value };
    return { [name]: true };
  }

  function scopeField() {
    if (kindOf() === "csv") return {};
    if (allTopics.checked) return { all_topics: true };
    const specs = topics.value.trim().split(/\s+/).filter(Boolean);
    if (!specs.length) throw new Error("name a topic (orders, or orders:0,2) or tick all topics");
    return { topics: specs };
  }

  const url = OL.groupPath(page.group, "reset");
  const planColumns = [
    { label: "topic", key: "topic" },
    { label: "queue", key: "queue_id", num: true },
    { label: "from", num: true, render: (r) => OL.num(r.from_offset) },
    { label: "to", num: true, render: (r) => OL.num(r.to_offset) },
    { label: "replayed", num: true, render: (r) => OL.num(r.from_offset === null ? 0 : Math.max(0, r.from_offset - r.to_offset)) },
    { label: "skipped", num: true, render: (r) => OL.num(r.from_offset === null ? 0 : Math.max(0, r.to_offset - r.from_offset)) },
  ];

  function showPlan(result, request) {
    const notes = []; // (empty lists are left out of the answer)
    const skipped = result.skipped_queues || [];
    const ignored = result.ignored_groups || [];
    if (skipped.length) notes.push(`left out (no offset then): ${skipped.map((q) => `${q.topic}:${q.queue_id}`).join(", ")}`);
    if (ignored.length) notes.push(`CSV rows of other groups ignored: ${ignored.join(", ")}`);
    if (result.policy) notes.push(result.policy);
    const reason = h("input", { id: "reset-reason", size: 50, required: true, placeholder: "why (recorded with the reset)" });
    const execute = h("button", { type: "submit", id: "reset-execute" }, "Execute this plan");
    const status = h("p", { id: "reset-status" });
    const confirm = h("form", { class: "controls", id: "reset-confirm" }, h("label", null, "Reason ", reason), execute);
    confirm.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      execute.disabled = true;
      const rows = result.plan.map(({ topic, queue_id, from_offset, to_offset }) => ({ topic, queue_id, from_offset, to_offset }));
      // JSON numbers past 2^53 lose digits in JavaScript: such a plan would be checked against
      // offsets it does not hold, so it is left to the CLI
      if (rows.some((r) => !Number.isSafeInteger(r.to_offset) || (r.from_offset !== null && !Number.isSafeInteger(r.from_offset)))) {
        status.className = "error";
        status.textContent = "Offsets past 2^53 cannot be sent exactly from a browser: use offset-ledger reset.";
        return;
      }
      try {
        const done = await OL.api("POST", url, { body: { plan: rows, ...request.scenario,
          backward_only: request.backward_only, reason: reason.value.trim(), execute: true } });
        status.className = "ok-msg";
        status.textContent = `Executed (seq ${done.seq}): the next pull of each queue starts at its new offset; `
          + "commits from before the reset are fenced.";
        await page.refresh();
      } catch (e) {
        status.className = "error";
        status.textContent = e.status === 409 && /stale plan/.test(e.message)
          ? `Refused, nothing changed: ${e.message}.` : `Refused (${e.status || "error"}): ${e.message}`;
      }
    });
    out.replaceChildren(
      h("p", { class: "plan-summary", id: "reset-summary" }, `${result.plan.length} queue(s): `
        + `${OL.num(result.messages_replayed)} message(s) to replay, ${OL.num(result.messages_skipped)} to skip`),
      result.plan.length ? OL.table(planColumns, result.plan, (r) => ({ dataset: { queue: `${r.topic}:${r.queue_id}` } }))
        : h("p", { class: "note" }, "nothing to reset"),
      ...notes.map((n) => h("p", { class: "note" }, n)),
      result.plan.length ? confirm : "", status);
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const request = { scenario: scenarioField(), backward_only: backward.checked };
      const result = await OL.api("POST", url, { body: { ...scopeField(), ...request.scenario,
        backward_only: request.backward_only } });
      showPlan(result, request);
    } catch (e) {
      OL.showError(out, e);
    }
  });
  return {};
}
