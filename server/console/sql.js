// The SQL page (audit role): POST /v1/sql with the query typed, the rows as a table, and the
// same rows as a CSV file to download (made here from the answer: no second query).
"use strict";

const SQL_EXAMPLE = "SELECT consumer_group, sum(lag) AS lag, max(lag_ms) AS max_lag_ms\n"
  + "FROM progress GROUP BY ALL ORDER BY lag DESC LIMIT 20";
const SQL_ROWS_SHOWN = 1000;

/** RFC 4180 CSV of rows keyed by `columns`. */
function toCsv(columns, rows) {
  const cell = (v) => {
    if (v === null || v === undefined) return "";
    const s = typeof v === "object" ? JSON.stringify(v) : String(v);
    return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [columns, ...rows.map((r) => columns.map((c) => r[c]))].map((line) => line.map(cell).join(",")).join("\r\n") + "\r\n";
}

OL.start(async (me) => {
  const { h } = OL;
  const target = document.getElementById("sql");
  if (!OL.can(me, "audit")) {
    target.replaceChildren(h("p", { class: "error" }, `SQL needs the audit role; ${me.name} has ${me.roles.join(", ")}.`));
    return;
  }
  const query = h("textarea", { id: "sql-query", rows: 6, spellcheck: "false" });
  query.value = sessionStorage.getItem("offset-ledger-sql") || SQL_EXAMPLE;
  const run = h("button", { type: "submit", id: "sql-run" }, "Run");
  const download = h("a", { id: "sql-csv", hidden: true, download: "offset-ledger.csv" }, "Download CSV");
  const info = h("span", { class: "note", id: "sql-info" });
  const out = h("div", { id: "sql-rows" });
  const form = h("form", null, query, h("div", { class: "controls" }, run, download, info));
  target.replaceChildren(form, out);
  let url = null;

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("offset-ledger-sql", query.value);
    run.disabled = true;
    const started = performance.now();
    try {
      const rows = await OL.api("POST", "/v1/sql", { body: { query: query.value } });
      const columns = rows.length ? Object.keys(rows[0]) : [];
      out.replaceChildren(rows.length ? OL.table(columns.map((c) => ({ label: c, key: c })), rows.slice(0, SQL_ROWS_SHOWN))
        : h("p", { class: "note" }, "no rows"));
      if (url) URL.revokeObjectURL(url);
      url = URL.createObjectURL(new Blob([toCsv(columns, rows)], { type: "text/csv" }));
      download.href = url;
      download.hidden = !rows.length;
      info.textContent = `${rows.length} row(s) in ${Math.round(performance.now() - started)} ms`
        + (rows.length > SQL_ROWS_SHOWN ? `; the first ${SQL_ROWS_SHOWN} shown, all in the CSV` : "");
    } catch (e) {
      download.hidden = true;
      info.textContent = "";
      OL.showError(out, e);
    } finally {
      run.disabled = false;
    }
  });
});
