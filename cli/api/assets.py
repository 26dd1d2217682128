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
.err { color: #b91c1c; font-size: .8rem; }
.notice { min-height: 1.2em; color: #d1fae5; } .notice.bad { color: #fecaca; }
header h1 a { color: inherit; text-decoration: none; }
header nav { display: flex; gap: .8rem; } header nav a[aria-current] { color: #fff;
  font-weight: 600; text-decoration: none; }
.section-head { display: flex; gap: 1rem; align-items: baseline; flex-wrap: wrap; }
.filters { display: flex; gap: .6rem; align-items: center; font-size: .85rem; flex-wrap: wrap; }
.filters select, .filters input { font: inherit; padding: .05rem .2rem; }
.pager { margin: .5rem 0 0; font-size: .85rem; }
.pager .shown { font-weight: 600; }
.ago { color: var(--muted); font-size: .8rem; white-space: nowrap; }
time { white-space: nowrap; }
abbr { text-decoration: none; }
pre.error-text { white-space: pre-wrap; word-break: break-word; margin: 0; max-width: 60rem;
  color: #7f1d1d; background: #fef2f2; padding: .25rem .4rem; border-radius: 4px;
  font-size: .8rem; max-height: 24rem; overflow: auto; }
table.fields th { width: 12rem; text-transform: none; font-size: .85rem; }
h3 { font-size: .95rem; margin: .8rem 0 .3rem; }
#token-form input { font: inherit; padding: .1rem .3rem; width: 14rem; }
"""

JS = r"""
(() => {
  "use strict";
  const body = document.body;
  const every = Number(body.dataset.refreshMs || 2000);
  const shown = new Map();
  let findings = null;
  let follow = null;  // the row the last action was about: its notice follows its status

  const hash = new URLSearchParams(location.hash.slice(1));
  const linked = hash.get("token");  // a link with #token=… (a fragment: never sent itself)
  if (hash.has("findings")) findings = { run: hash.get("findings"), offset: "0" };
  if (hash.has("token") || hash.has("findings")) {
    history.replaceState(null, "", location.pathname + location.search);
  }
  // The credential is the session cookie (HttpOnly: this script never holds a token).
  const auth = () => ({});
  let roles = null;  // the signed-in principal's roles; null: not known yet
  const may = (role) => !role || role === "read" || (roles !== null &&
    (roles.includes("admin") || roles.includes(role)));
  function grey() {  // a button whose route's role the principal lacks is shown, but off
    document.querySelectorAll("button[data-role]").forEach((b) => {
      const allowed = roles === null || may(b.dataset.role);
      b.disabled = !allowed;
      b.title = allowed ? "" : "needs the " + b.dataset.role + " role";
    });
  }
  async function whoami() {
    const who = document.getElementById("who");
    try {
      const response = await fetch("/api/whoami", { cache: "no-store" });
      if (!response.ok) {
        roles = [];
        who.textContent = "";
        document.getElementById("sign-out").hidden = true;
        return;
      }
      const doc = await response.json();
      roles = doc.roles;
      who.textContent = doc.auth ? "signed in as " + doc.name + " (" + doc.roles.join(", ") +
        ")" : "no-token mode (local)";
      document.getElementById("sign-out").hidden = !doc.auth;
      document.getElementById("token-form").hidden = true;
    } catch (_) {
      // the sections say the API does not answer
    }
    grey();
  }
  async function signIn(token) {
    const response = await fetch("/dashboard/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: token }),
      credentials: "same-origin",
    });
    if (!response.ok) say(await message(response), true);
    await whoami();
    refresh();
  }
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
  const utc = (date) => date.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  async function message(response) {
    try {
      const doc = await response.json();
      return doc.message || doc.error || JSON.stringify(doc);
    } catch (_) {
      return response.status + " " + response.statusText;
    }
  }
  // One section from its URL. A 401 is said once for the page (see refresh), not per section.
  async function fill(el, url) {
    let html;
    let refused = null;
    try {
      const response = await fetch(url, { headers: auth(), cache: "no-store" });
      if (response.status === 401) {
        refused = await message(response);
        html = '<p class="muted">needs the API token</p>';
      } else {
        html = response.ok ? await response.text() : box(await message(response));
      }
    } catch (err) {
      html = box("the API does not answer: " + err);
    }
    if (shown.get(el.id) !== html) {  // swap only what changed: no flicker, no full reload
      el.innerHTML = html;
      shown.set(el.id, html);
      grey();
    }
    return refused;
  }
  function loadFindings() {
    if (!findings) return Promise.resolve(null);
    const q = new URLSearchParams({ run: findings.run, offset: findings.offset });
    return fill(document.getElementById("findings"), "/dashboard/fragments/findings?" + q);
  }
  async function followRow() {  // the notice says the row's status now, not at the click
    if (!follow) return;
    try {
      const response = await fetch(follow.url, { headers: auth(), cache: "no-store" });
      if (!response.ok) return;
      const doc = await response.json();
      if (doc.status && doc.status !== follow.status) {
        follow.status = doc.status;
        say(follow.label + " is now " + doc.status + " (" + utc(new Date()) + ")");
      }
    } catch (_) {
      // the sections say the API does not answer
    }
  }
  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const frames = Array.from(document.querySelectorAll("[data-src]"));
      const refused = await Promise.all([
        ...frames.map((el) => fill(el, el.dataset.src)),
        loadFindings(),
      ]);
      const why = refused.find((r) => r);
      const gate = document.getElementById("auth-error");
      const said = why ? box(why) : "";
      if (gate.innerHTML !== said) gate.innerHTML = said;  // one box, however many sections
      if (why) document.getElementById("token-form").hidden = false;
      await followRow();
      const now = new Date();
      document.getElementById("clock").textContent = utc(now);
      document.getElementById("updated").textContent = "updated " + utc(now).slice(11);
      body.dataset.loaded = "true";
    } finally {
      busy = false;
    }
  }
  function tracked(doc, verb) {  // the row an answer is about, and where to read it again
    if (doc.job && doc.job.job_id) {
      return {
        url: "/api/ledger/jobs/" + encodeURIComponent(doc.job.job_id),
        label: verb + ": job " + doc.job.job_id,
        status: doc.job.status,
      };
    }
    if (doc.run_id && doc.job_name) {
      return {
        url: "/api/admin/jobs/" + encodeURIComponent(doc.job_name) + "/runs/" +
          encodeURIComponent(doc.run_id),
        label: verb + ": run " + doc.run_id,
        status: doc.status || null,
      };
    }
    return null;
  }
  async function post(button) {
    if (!window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    follow = null;
    try {
      const response = await fetch(button.dataset.post, {
        method: "POST",
        headers: writeHeaders(),
        credentials: "same-origin",
      });
      const doc = await response.json().catch(() => ({}));
      if (response.ok) {
        const verb = button.textContent.trim();
        follow = tracked(doc, verb);
        const what = follow ? " " + follow.label.slice(verb.length + 2) : "";
        const how = doc.outcome || doc.decision || "";
        const state = follow && follow.status;
        const now = state && state !== how ? " (now " + state + ")" : "";
        say("done (" + response.status + ") " + verb + what + (how ? ": " + how : "") + now);
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
      const field = document.getElementById("token");
      const token = field.value.trim();
      field.value = "";
      signIn(token);
    } else if (button.id === "sign-out") {
      fetch("/dashboard/session/end", { method: "POST", credentials: "same-origin" })
        .then(() => whoami()).then(() => refresh());
    }
  });
  const loop = async () => {
    await refresh();
    setTimeout(loop, every);
  };
  (linked ? signIn(linked) : whoami()).then(loop);
})();
"""
