// The console's one way to the server: every page renders answers of the /v1 API, fetched here
// with the session's token (kept in sessionStorage, sent as Authorization: Bearer), and the
// helpers every page uses to build DOM from them (text only: names never become markup).
"use strict";

const OL = (() => {
  const TOKEN_KEY = "offset-ledger-token";

  class ApiError extends Error {
    constructor(status, message, doc) {
      super(message);
      this.status = status;
      this.doc = doc;
    }
  }

  /** A /v1 call: JSON in and out; a non-2xx answer throws ApiError with the server's line. */
  async function api(method, path, { query, body } = {}) {
    const url = new URL(path, location.origin);
    for (const [k, v] of Object.entries(query || {})) {
      if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
    }
    const headers = { accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.authorization = "Bearer " + token;
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await fetch(url, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let doc = null;
    try {
      doc = text ? JSON.parse(text) : null;
    } catch (e) {
      doc = { error: text };
    }
    if (!res.ok) throw new ApiError(res.status, (doc && doc.error) || res.statusText, doc);
    return doc;
  }

  /** The API path of a group's resource: the name percent-encoded once (a `%` in a name is
   * sent as %25; the server decodes a path once), `groupPath("a%41", "reset")`. */
  const groupPath = (group, ...rest) => ["/v1/groups", encodeURIComponent(group), ...rest].join("/");

  /** An element: h("a", {href: "#", class: "x"}, "text", child). Strings become text nodes. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));

  /** A duration in ms as people read it: 950 ms, 42 s, 3 min 20 s, 5 h 12 min, 3 d 4 h. */
  function duration(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return `${ms} ms`;
    const s = Math.floor(ms / 1000);
    const parts = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];
    for (let i = 0; i < parts.length; i++) {
      const [unit, name] = parts[i];
      if (s >= unit) {
        const rest = parts[i + 1];
        const big = Math.floor(s / unit);
        const small = rest ? Math.floor((s % unit) / rest[0]) : 0;
        return small && big < 100 ? `${big} ${name} ${small} ${rest[1]}` : `${big} ${name}`;
      }
    }
    return `${s} s`;
  }

  /** A time (epoch ms or ISO-8601) as ISO-8601 UTC to the second. */
  function time(t) {
    if (t === null || t === undefined) return "–";
    const d = typeof t === "number" ? new Date(t) : new Date(t);
    return d.toISOString().replace("T", " ").replace(/\.\d{3}Z$/, "Z");
  }

  /** `<input type=datetime-local>` values are read as UTC, as every time the API takes. */
  const fromLocalInput = (v) => (v ? Date.parse(v + "Z") : null);
  const toLocalInput = (ms) => new Date(ms).toISOString().slice(0, 19);

  const SEVERITY = { ERR: 4, STOP: 4, STALL: 4, REWIND: 4, WARN: 3, NOTFOUND: 2, OK: 1 };
  const status = (s) => h("span", { class: `status s-${s}` }, s);

  /** A table: columns [{key, label, num?, render?(row)}]; `rowAttrs(row)` adds attributes. */
  function table(columns, rows, rowAttrs) {
    const head = h("tr", null, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.label)));
    const body = rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : null, columns.map((c) => {
      const v = c.render ? c.render(r) : r[c.key];
      return h("td", { class: c.num ? "num" : null }, v === null || v === undefined ? "–" : v);
    })));
    return h("table", null, h("thead", null, head), h("tbody", null, body));
  }

  /** Shows `error` (an ApiError or any Error) in `el`, naming the role a 403 lacks. */
  function showError(el, error) {
    el.replaceChildren(h("p", { class: "error" }, error.status ? `${error.status}: ` : "", error.message));
  }

  const can = (me, role) => me.roles.includes(role);

  /** The header: links, who is signed in, and the token field when the server checks tokens. */
  function header(me) {
    const bar = document.getElementById("bar");
    const links = [h("a", { href: "/" }, "Groups")];
    if (me && can(me, "audit")) links.push(h("a", { href: "/console/sql.html" }, "SQL"));
    const who = me && me.tokens ? [h("span", { class: "who" }, `${me.name} (${me.roles.join(", ")})`),
      h("button", { type: "button", onclick: () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); } },
        "Sign out")] : [];
    bar.replaceChildren(h("strong", null, "offset-ledger"), ...links, h("span", { class: "grow" }), ...who);
  }

  /** Asks for a token until the server takes one; resolves with whoami's answer. */
  function login(message) {
    const main = document.querySelector("main");
    header(null);
    return new Promise((resolve) => {
      const input = h("input", { type: "password", id: "token", autocomplete: "off", size: 48,
        placeholder: "token (offset-ledger token add prints it)" });
      const note = h("p", { class: "error", id: "login-error" }, message || "");
      const form = h("form", { id: "login", class: "login" }, h("label", { for: "token" }, "Token "), input,
        h("button", { type: "submit" }, "Sign in"), note);
      form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        try {
          resolve(await api("GET", "/v1/whoami"));
        } catch (e) {
          sessionStorage.removeItem(TOKEN_KEY);
          note.textContent = e.message;
        }
      });
      main.replaceChildren(h("h1", null, "Sign in"), h("p", null,
        "This server checks tokens: the console calls its API with yours, so it sees and may do what your roles allow."),
      form);
      input.focus();
    });
  }

  /** Runs a page once the server knows who calls: `page(me, main)`; marks <body> ready after. */
  async function start(page) {
    const main = document.querySelector("main");
    const content = Array.from(main.childNodes);
    let me;
    try {
      me = await api("GET", "/v1/whoami");
    } catch (e) {
      if (e.status !== 401) { showError(main, e); return; }
      me = await login(sessionStorage.getItem(TOKEN_KEY) ? e.message : "");
      main.replaceChildren(...content);
    }
    header(me);
    try {
      await page(me, main);
    } catch (e) {
      showError(main, e);
    }
    document.body.dataset.ready = "1";
    performance.mark("ol-ready"); // what bench/console_bench.py times
  }

  return { api, ApiError, groupPath, h, num, duration, time, fromLocalInput, toLocalInput, SEVERITY, status,
    table, showError, can, start };
})();
