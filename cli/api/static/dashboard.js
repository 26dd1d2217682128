// The dashboard's script: swaps the server-rendered sections in place and posts the buttons.
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
