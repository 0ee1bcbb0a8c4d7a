// The operator page: everything it shows it reads through the service's /v1 routes, with
// the API key the operator typed in (kept in this tab's session storage, sent only in the
// Authorization header). Names, paths and payloads are user data: the page is built from
// DOM nodes and text (el() below), never from HTML.
"use strict";

(() => {
  const KEY = "pathkeeper.key";
  const STATUS_EVERY_MS = 5000;
  const RETRY_MS = 3000;
  const FEED_WAIT_S = 25;
  const MAX_EVENTS = 50;
  const MAX_CONTENT = 2000;
  const $ = (id) => document.getElementById(id);

  /** An element with properties and children (strings become text nodes). */
  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props)) {
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name.startsWith("data-")) node.setAttribute(name, String(value));
      else node[name] = value;
    }
    node.append(...children);
    return node;
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** GET a /v1 route with the key; the JSON answer, or an ApiError of its error body. */
  async function api(path, params = {}, { key = sessionStorage.getItem(KEY), signal } = {}) {
    const url = new URL(path, location.origin);
    for (const [name, value] of Object.entries(params)) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    const resp = await fetch(url, {
      headers: { Authorization: `Bearer ${key || ""}` }, cache: "no-store", signal,
    });
    const body = await resp.json().catch(() => null);
    if (!resp.ok) {
      const error = (body && body.error) || {};
      const failure = new ApiError(resp.status, error.code || "error",
        error.message || resp.statusText);
      if (resp.status === 401 && key === sessionStorage.getItem(KEY)) {
        // The key in use was revoked (or expired): ask for one again.
        sessionStorage.removeItem(KEY);
        showLogin(`The service no longer accepts this key (${describe(failure)}).`);
      }
      throw failure;
    }
    return body;
  }

  function describe(error) {
    if (error instanceof ApiError) return `${error.status} ${error.code}: ${error.message}`;
    return `the service did not answer (${error.message})`;
  }

  const nsUrl = (ns, suffix) => `/v1/namespaces/${encodeURIComponent(ns)}${suffix}`;

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); });
    });
  }

  // ------------------------------------------------------------------ the key

  let session = null; // AbortController of what runs for the key in use
  let view = null; // AbortController of what runs for the namespace shown
  let ns = null;

  function showLogin(message) {
    if (session) session.abort();
    if (view) view.abort();
    session = view = ns = null;
    $("console").hidden = true;
    $("ns-label").hidden = $("forget-key").hidden = true;
    $("login").hidden = false;
    $("key-error").textContent = message || "";
    $("key-input").value = "";
    $("key-input").focus();
  }

  async function useKey(key) {
    let namespaces;
    try {
      namespaces = (await api("/v1/namespaces", {}, { key })).namespaces;
    } catch (error) {
      sessionStorage.removeItem(KEY);
      showLogin(error instanceof ApiError
        ? `The service refused this key (${describe(error)}).`
        : `Cannot check the key: ${describe(error)}.`);
      return;
    }
    sessionStorage.setItem(KEY, key);
    $("login").hidden = true;
    $("console").hidden = false;
    $("ns-label").hidden = $("forget-key").hidden = false;
    session = new AbortController();
    followStatus(session.signal);
    const select = $("ns-select");
    select.replaceChildren(...namespaces.map((name) => el("option", { value: name }, name)));
    if (namespaces.length) showNamespace(namespaces[0]);
    else $("tree-error").textContent = "This key covers no namespace that exists.";
  }

  // ------------------------------------------------------------------ the indexer

  async function followStatus(signal) {
    while (!signal.aborted) {
      try {
        const out = await api("/v1/indexer/status", {}, { signal });
        if (signal.aborted) return;
        renderStatus(out);
        $("indexer-error").textContent = "";
      } catch (error) {
        if (signal.aborted) return;
        $("indexer-error").textContent = `Indexer status: ${describe(error)}`;
      }
      await sleep(STATUS_EVERY_MS, signal);
    }
  }

  function renderStatus(out) {
    $("indexer-consumer").textContent = `consumer ${out.consumer}`;
    const rows = [];
    if (!out.partitions.length) {
      rows.push(el("tr", {}, el("td", { colSpan: 5 }, "No worker of this consumer ever ran.")));
    }
    for (const p of out.partitions) {
      rows.push(el("tr", { class: "partition", "data-partition": p.partition },
        el("td", { class: "partition-id" }, String(p.partition)),
        el("td", { class: "checkpoint" }, String(p.checkpoint)),
        el("td", { class: p.lag_events ? "lag-events lagging" : "lag-events" },
          String(p.lag_events)),
        el("td", { class: "lag-seconds" }, p.lag_seconds.toFixed(2)),
        el("td", { class: p.holder_pid ? "holder" : "holder unheld" },
          p.holder_pid ? String(p.holder_pid) : "none")));
      for (const n of p.namespaces) {
        rows.push(el("tr", { class: "namespace-lag" },
          el("td", { class: "namespace" }, n.namespace), el("td"),
          el("td", { class: "ns-lag-events" }, String(n.lag_events)),
          el("td", {}, n.lag_seconds.toFixed(2)), el("td")));
      }
    }
    $("partitions").tBodies[0].replaceChildren(...rows);
    const notes = [];
    if (out.dead_letters_pending !== null) {
      notes.push(`dead letters pending: ${out.dead_letters_pending}`);
    }
    for (const w of out.held_back_by) {
      const who = w.pid !== null ? `pid ${w.pid}` : `prepared transaction ${w.gid}`;
      notes.push(`readers wait for ${who} (open ${w.age === null ? "?" : w.age} s)`);
    }
    notes.push(`updated ${new Date().toLocaleTimeString()}`);
    $("indexer-notes").textContent = notes.join(" · ");
  }

  // ------------------------------------------------------------------ the namespace

  function showNamespace(name) {
    if (view) view.abort();
    view = new AbortController();
    ns = name;
    $("ns-select").value = name;
    $("hits").replaceChildren();
    $("search-error").textContent = "";
    $("stat").hidden = true;
    openDir("/");
    followEvents(name, view.signal);
  }

  /** The change feed's tail: from the end of the log as the page opens, long-polled. */
  async function followEvents(name, signal) {
    const list = $("event-list");
    const panel = $("events");
    list.replaceChildren();
    panel.dataset.live = "no";
    let after = "now";
    while (!signal.aborted) {
      try {
        const page = await api(nsUrl(name, "/events"),
          { after, wait: after === "now" ? 0 : FEED_WAIT_S, limit: 100 }, { signal });
        if (signal.aborted) return;
        after = page.cursor;
        panel.dataset.live = "yes";
        $("events-error").textContent = "";
        for (const event of page.events) list.prepend(eventItem(event));
        while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
      } catch (error) {
        if (signal.aborted) return;
        panel.dataset.live = "no";
        $("events-error").textContent = `Events: ${describe(error)}`;
        if (error.status === 409 || error.status === 410) after = "now";
        await sleep(RETRY_MS, signal);
      }
    }
  }

  function eventItem(event) {
    const p = event.payload || {};
    let what = p.path !== undefined ? p.path : (p.namespace || "");
    if (p.old_path !== undefined && p.old_path !== p.path) what = `${p.old_path} → ${p.path}`;
    return el("li", {},
      el("span", { class: "event-pos" }, `#${event.position}`),
      el("span", { class: "event-type" }, event.type),
      el("span", { class: "event-path" }, what),
      el("span", { class: "event-time muted" },
        ` ${new Date(event.committed_at).toLocaleTimeString()}`));
  }

  // ------------------------------------------------------------------ the tree

  async function openDir(path, cursor) {
    const children = $("children");
    const { signal } = view;
    try {
      const page = await api(nsUrl(ns, "/node/children"), { path, cursor, limit: 200 },
        { signal });
      if (!cursor) {
        children.replaceChildren();
        renderCrumbs(path);
      }
      children.append(...page.nodes.map(childItem));
      children.dataset.path = path;
      const more = $("more");
      more.hidden = !page.cursor;
      more.onclick = () => openDir(path, page.cursor);
      $("tree-error").textContent = "";
    } catch (error) {
      if (!signal.aborted) $("tree-error").textContent = `${path}: ${describe(error)}`;
    }
  }

  function childItem(node) {
    const open = node.kind === "dir" ? () => openDir(node.path) : () => showNode(node.id);
    return el("li", { class: node.kind },
      el("span", { class: "kind" }, node.kind),
      el("button", { type: "button", class: "name", onclick: open }, node.name));
  }

  function renderCrumbs(path) {
    const names = path.split("/").filter(Boolean);
    const crumbs = [el("button", { type: "button", onclick: () => openDir("/") }, "/")];
    names.forEach((name, i) => {
      const to = `/${names.slice(0, i + 1).join("/")}`;
      if (i) crumbs.push(el("span", { class: "sep" }, "/"));
      crumbs.push(el("button", { type: "button", onclick: () => openDir(to) }, name));
    });
    $("crumbs").replaceChildren(...crumbs);
  }

  async function showNode(id) {
    const { signal } = view;
    try {
      const node = await api(nsUrl(ns, `/nodes/${encodeURIComponent(id)}`), {}, { signal });
      $("stat-path").textContent = node.path;
      $("stat-kind").textContent = node.kind;
      $("stat-version").textContent = String(node.version);
      $("stat-id").textContent = node.id;
      $("stat-updated").textContent = node.updated_at || "";
      $("stat-metadata").textContent = JSON.stringify(node.metadata || {});
      const content = node.content || "";
      $("stat-content").textContent = content.length > MAX_CONTENT
        ? `${content.slice(0, MAX_CONTENT)}… (${content.length} characters)` : content;
      $("stat").hidden = false;
      $("tree-error").textContent = "";
    } catch (error) {
      if (!signal.aborted) $("tree-error").textContent = describe(error);
    }
  }

  // ------------------------------------------------------------------ search

  async function search(text) {
    const hits = $("hits");
    if (!text) {
      hits.replaceChildren();
      return;
    }
    const { signal } = view;
    try {
      const page = await api(nsUrl(ns, "/search"), { q: text, limit: 50 }, { signal });
      hits.replaceChildren(...page.hits.map((hit) => el("li", {},
        el("span", { class: "kind" }, hit.kind),
        el("button", { type: "button", class: "path", onclick: () => showNode(hit.node_id) },
          hit.path))));
      if (!page.hits.length) hits.append(el("li", { class: "muted" }, "No match."));
      $("search-error").textContent = "";
    } catch (error) {
      if (!signal.aborted) $("search-error").textContent = `Search: ${describe(error)}`;
    }
  }

  // ------------------------------------------------------------------ wiring

  document.addEventListener("DOMContentLoaded", () => {
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const key = $("key-input").value.trim();
      if (key) useKey(key);
    });
    $("forget-key").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      showLogin("");
    });
    $("ns-select").addEventListener("change", (event) => showNamespace(event.target.value));
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      if (ns !== null) search($("search-input").value.trim());
    });
    const key = sessionStorage.getItem(KEY);
    if (key) useKey(key);
    else showLogin("");
  });
})();
