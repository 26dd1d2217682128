"""The dashboard's stylesheet and script, served by the API itself (no CDN, no build step)."""

from __future__ import annotations

CSS = """
:root { color-scheme: light; --fg: #111827; --muted: #6b7280; --line: #e5e7eb; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  margin: 0; background: #f9fafb; }
header { display: flex; gap: 1rem; align-items: center; padding: .6rem 1.2rem;
  background: #111827; color: #f9fafb; flex-wrap: wrap; }
header h1 { font-size: 1.1rem; margin: 0 1rem 0 0; }
header a { color: #93c5fd; }
header .muted { color: #9ca3af; }
main { padding: .4rem 1.2rem 2rem; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px;
  margin: .8rem 0; padding: .4rem .8rem .6rem; }
h2 { font-size: 1rem; margin: .3rem 0 .5rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .25rem .5rem; border-bottom: 1px solid var(--line);
  vertical-align: middle; }
th { font-weight: 600; color: var(--muted); font-size: .8rem; text-transform: uppercase; }
code { font-size: .8rem; word-break: break-all; }
.muted { color: var(--muted); }
.id { font-family: ui-monospace, monospace; font-size: .8rem; }
.status { font-weight: 600; }
.status.ok { color: #15803d; } .status.bad { color: #b91c1c; } .status.warn { color: #b45309; }
.status.live { color: #1d4ed8; } .status.idle { color: var(--muted); }
.pill { display: inline-block; color: #fff; border-radius: 999px; padding: 0 .55rem;
  font-size: .78rem; font-weight: 600; white-space: nowrap; }
.bar { display: inline-block; width: 9rem; height: .7rem; background: #e5e7eb;
  border-radius: 4px; overflow: hidden; vertical-align: middle; }
.bar .fill { display: block; height: 100%; background: #2563eb; transition: width .4s; }
.pct { font-variant-numeric: tabular-nums; font-size: .8rem; }
.kind { font-size: .72rem; color: var(--muted); border: 1px solid var(--line);
  border-radius: 3px; padding: 0 .25rem; }
button.act { font: inherit; font-size: .8rem; padding: .1rem .5rem; border-radius: 4px;
  border: 1px solid #9ca3af; background: #fff; cursor: pointer; }
button.act.danger { border-color: #b91c1c; color: #b91c1c; }
.error-box { color: #b91c1c; background: #fef2f2; border: 1px solid #fecaca; padding: .4rem;
  border-radius: 4px; }
.err { color: #b91c1c; cursor: help; text-decoration: underline dotted; }
.notice { min-height: 1.2em; color: #d1fae5; } .notice.bad { color: #fecaca; }
#token-form input { font: inherit; padding: .1rem .3rem; width: 14rem; }
"""

JS = r"""
(() => {
  "use strict";
  const KEY = "planq-api-token";
  const body = document.body;
  const every = Number(body.dataset.refreshMs || 2000);
  const sections = {
    recoverable: "/dashboard/fragments/recoverable",
    runs: "/dashboard/fragments/runs",
    plans: "/dashboard/fragments/plans",
    jobs: "/dashboard/fragments/jobs",
  };
  const shown = new Map();
  let findings = null;

  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.has("token")) {  // a link with #token=… (never sent to a server): this tab only
    sessionStorage.setItem(KEY, hash.get("token"));
  }
  if (hash.has("findings")) findings = { run: hash.get("findings"), offset: "0" };
  if (sessionStorage.getItem(KEY)) document.getElementById("token-form").hidden = true;
  if (hash.has("token") || hash.has("findings")) {
    history.replaceState(null, "", location.pathname + location.search);
  }
  const auth = () => {
    const token = sessionStorage.getItem(KEY);
    return token ? { Authorization: "Bearer " + token } : {};
  };
  // without PLANQ_API_TOKEN the page carries a CSRF token (bound to its cookie) for writes
  const csrf = document.querySelector('meta[name="planq-csrf"]');
  const writeHeaders = () =>
    csrf ? Object.assign(auth(), { "X-Planq-CSRF": csrf.content }) : auth();
  const say = (text, bad) => {
    const el = document.getElementById("notice");
    el.textContent = text;
    el.className = bad ? "notice bad" : "notice";
  };
  const box = (text) => {
    const p = document.createElement("p");
    p.className = "error-box";
    p.textContent = text;
    return p.outerHTML;
  };
  async function message(response) {
    try {
      const doc = await response.json();
      return doc.message || doc.error || JSON.stringify(doc);
    } catch (_) {
      return response.status + " " + response.statusText;
    }
  }
  async function fill(id, url) {
    const el = document.getElementById(id);
    let html;
    try {
      const response = await fetch(url, { headers: auth(), cache: "no-store" });
      if (response.status === 401) document.getElementById("token-form").hidden = false;
      html = response.ok ? await response.text() : box(await message(response));
    } catch (err) {
      html = box("the API does not answer: " + err);
    }
    if (shown.get(id) !== html) {  // swap only what changed: no flicker, no full reload
      el.innerHTML = html;
      shown.set(id, html);
    }
  }
  async function loadFindings() {
    if (!findings) return;
    const q = new URLSearchParams({ run: findings.run, offset: findings.offset });
    await fill("findings", "/dashboard/fragments/findings?" + q);
  }
  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      await Promise.all(Object.entries(sections).map(([id, url]) => fill(id, url)));
      await loadFindings();
      document.getElementById("updated").textContent =
        "updated " + new Date().toLocaleTimeString();
      body.dataset.loaded = "true";
    } finally {
      busy = false;
    }
  }
  async function post(button) {
    if (!window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    try {
      const response = await fetch(button.dataset.post, {
        method: "POST",
        headers: writeHeaders(),
        credentials: "same-origin",
      });
      const doc = await response.json().catch(() => ({}));
      if (response.ok) {
        const run = doc.run_id ? " run " + doc.run_id : "";
        const job = doc.job ? " job " + doc.job.job_id + " " + doc.job.status : "";
        const how = doc.decision ? " " + doc.decision : "";
        say("done (" + response.status + ")" + run + job + how);
      } else {
        say(doc.message || response.status + " " + response.statusText, true);
      }
    } catch (err) {
      say("the API does not answer: " + err, true);
    } finally {
      button.disabled = false;
      refresh();
    }
  }
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (!button) return;
    if (button.dataset.post) post(button);
    else if (button.dataset.findings) {
      findings = { run: button.dataset.findings, offset: button.dataset.offset || "0" };
      loadFindings();
    } else if (button.id === "save-token") {
      sessionStorage.setItem(KEY, document.getElementById("token").value.trim());
      document.getElementById("token-form").hidden = true;
      refresh();
    }
  });
  const loop = async () => {
    await refresh();
    setTimeout(loop, every);
  };
  loop();
})();
"""
