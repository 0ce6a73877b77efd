// ratelimitd's live console: reads /console/state every couple of seconds
// and shows it; sets and removes run-time overrides with an admin token.
// Everything a server sent is written as text (textContent), never as HTML.
"use strict";

// ?every=MS: how often the page reads (250 ms to a minute; 2 s by default)
const asked = Number(new URLSearchParams(location.search).get("every"));
const every = Number.isFinite(asked) && asked > 0 ? Math.min(60000, Math.max(250, asked)) : 2000;
const keep = 6; // samples a rate is taken over: about 10 s at the default
const samples = new Map(); // action -> [{t, a, d}], oldest first
let totals = [];
const rows = new Map(); // action -> {tr, cells}
let polls = 0;
let last = null;
let started = null; // the daemon's start: another one means counters anew

const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem("ratelimitd-token") || "";
}

function headers() {
  const t = token();
  return t ? { Authorization: "Bearer " + t } : {};
}

// A user as the daemon shows it (and takes it back): printable ASCII, and
// %XX for a blank, '%', a control byte or any byte past ASCII.
function shown(text) {
  let s = "";
  for (const b of new TextEncoder().encode(text)) {
    if (b <= 0x20 || b === 0x25 || b >= 0x7f)
      s += "%" + b.toString(16).toUpperCase().padStart(2, "0");
    else s += String.fromCharCode(b);
  }
  return s;
}

function push(list, sample) {
  if (list.length && (sample.a < list[list.length - 1].a || sample.d < list[list.length - 1].d))
    list.length = 0; // counters going back: they began again
  list.push(sample);
  if (list.length > keep) list.shift();
}

// Decisions a second and the share denied over the samples kept.
function rate(list) {
  if (list.length < 2) return null;
  const o = list[0], n = list[list.length - 1];
  const dt = n.t - o.t;
  if (dt <= 0) return null;
  const da = n.a - o.a, dd = n.d - o.d;
  return { perSecond: (da + dd) / dt, denied: da + dd ? dd / (da + dd) : 0 };
}

function fmtRate(r) {
  if (!r) return "-";
  const v = r.perSecond;
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

function fmtPct(r) {
  return r ? (100 * r.denied).toFixed(1) + "%" : "-";
}

function fmtAge(s) {
  if (s < 0 || !isFinite(s)) return "-";
  if (s < 90) return Math.round(s) + "s";
  if (s < 5400) return Math.round(s / 60) + "m";
  if (s < 129600) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = text;
  tr.appendChild(td);
  return td;
}

function showStore(st, stores) {
  const b = $("store-status");
  b.dataset.status = st.status;
  b.textContent = st.backend + ": " + st.status;
  // the stores of stores: after the default one's why, by name
  const named = (stores || []).map(
    (n) => n.name + ": " + n.status + (n.why ? " (" + n.why + ")" : ""));
  $("store-why").textContent = [st.why].concat(named).filter(Boolean).join("; ");
}

function showTop(top) {
  const body = $("top").tBodies[0];
  $("top-off").hidden = top !== null;
  $("top").hidden = top === null;
  body.replaceChildren();
  if (!top) return;
  $("top-window").textContent = "(last " + top.window_s + " s)";
  for (const u of top.users) {
    const tr = document.createElement("tr");
    tr.dataset.user = u.user;
    tr.dataset.action = u.action;
    cell(tr, u.user, "user");
    cell(tr, u.action);
    cell(tr, String(u.denied), "n");
    cell(tr, String(u.requests), "n");
    cell(tr, String(u.over), "n over"); // 0: exact (see the header's title)
    body.appendChild(tr);
  }
}

function showActions(s) {
  const names = $("action-names");
  const seen = new Set();
  const t = s.mono; // the daemon's monotonic clock: a step of its wall clock moves no rate
  for (const a of s.actions) {
    seen.add(a.name);
    let list = samples.get(a.name);
    if (!list) samples.set(a.name, (list = []));
    push(list, { t, a: a.allowed, d: a.denied });
    let r = rows.get(a.name);
    if (!r) {
      const tr = document.createElement("tr");
      tr.dataset.action = a.name;
      r = { tr, cells: [] };
      for (const cls of ["", "", "n rate", "n ratio", "n", "n"]) r.cells.push(cell(tr, "", cls));
      r.cells[0].textContent = a.name;
      rows.set(a.name, r);
      const o = document.createElement("option");
      o.value = a.name;
      names.appendChild(o);
    }
    r.info = a;
    r.rate = rate(list);
    r.cells[1].textContent = a.limits;
    r.cells[2].textContent = fmtRate(r.rate);
    r.cells[3].textContent = fmtPct(r.rate);
    r.cells[4].textContent = String(a.allowed);
    r.cells[5].textContent = String(a.denied);
    r.tr.classList.toggle("denying", !!(r.rate && r.rate.denied > 0));
    r.tr.classList.toggle("shadow", a.shadow);
  }
  for (const [name, r] of rows)
    if (!seen.has(name)) {
      // gone with a reload
      r.tr.remove();
      rows.delete(name);
      samples.delete(name);
      for (const o of names.querySelectorAll("option"))
        if (o.value === name) o.remove();
    }
  push(totals, { t, a: s.totals.allowed, d: s.totals.denied });
  const tr = rate(totals);
  $("total-rate").textContent = fmtRate(tr);
  $("total-denied").textContent = fmtPct(tr);
  renderActions();
}

// The actions' rows in order (busiest first), those the filter keeps.
function renderActions() {
  const f = $("filter").value.trim();
  const order = [...rows.values()]
    .filter((r) => !f || r.info.name.includes(f))
    .sort((x, y) =>
      (y.rate ? y.rate.perSecond : 0) - (x.rate ? x.rate.perSecond : 0) ||
      (y.info.allowed + y.info.denied) - (x.info.allowed + x.info.denied) ||
      (x.info.name < y.info.name ? -1 : x.info.name > y.info.name ? 1 : 0));
  const body = $("actions").tBodies[0];
  const frag = document.createDocumentFragment();
  for (const r of order) frag.appendChild(r.tr);
  body.replaceChildren(frag);
  $("action-count").textContent = String(rows.size);
  $("shown-count").textContent = f ? order.length + " of " + rows.size + " shown" : "";
}

// The overrides' rows are kept and updated in place (a click on a button
// must find the element it aimed at, however often the page reads).
const overrideRows = new Map(); // action + " " + user -> {tr, spec, ttl}

function overrideRow(o) {
  const tr = document.createElement("tr");
  tr.dataset.user = o.user;
  tr.dataset.action = o.action;
  cell(tr, o.user, "user");
  cell(tr, o.action);
  const r = { tr, spec: cell(tr, ""), ttl: cell(tr, "", "n") };
  const b = document.createElement("button");
  b.type = "button";
  b.className = "remove";
  b.textContent = "remove";
  b.addEventListener("click", () => removeOverride(o.action, o.user));
  cell(tr, "").appendChild(b);
  return r;
}

function showOverrides(s) {
  const body = $("overrides").tBodies[0];
  const admin = s.admin !== null;
  $("admin-why").textContent = admin ? "as " + s.admin : s.admin_why;
  $("overrides").hidden = !admin;
  $("override-form").hidden = !admin;
  // without an admin identity's token the overrides are not sent: say so
  // (not "-", which reads as none or not read yet), and what would show them
  $("override-count").textContent = admin ? String(s.overrides.length) : "hidden";
  $("override-hidden").hidden = admin;
  $("override-hidden").textContent = admin
    ? ""
    : s.admin_why.startsWith("no identity")
      ? "shown on admin listeners only"
      : "need an admin token";
  $("override-stat").title = admin ? "" : s.admin_why;
  const seen = new Set();
  for (const o of admin ? s.overrides : []) {
    const key = o.action + " " + o.user;
    seen.add(key);
    let r = overrideRows.get(key);
    if (!r) overrideRows.set(key, (r = overrideRow(o)));
    r.spec.textContent = o.spec;
    r.ttl.textContent = o.ttl_ms < 0 ? "never" : fmtAge(o.ttl_ms / 1000);
    body.appendChild(r.tr); // in the daemon's order (moved, never remade)
  }
  for (const [key, r] of overrideRows)
    if (!seen.has(key)) {
      r.tr.remove();
      overrideRows.delete(key);
    }
}

function show(s) {
  if (started !== null && s.started !== started) {
    // another daemon, or this one restarted: no rate spans the two
    for (const list of samples.values()) list.length = 0;
    totals = [];
  }
  started = s.started;
  $("version").textContent = s.version;
  showStore(s.store, s.stores);
  $("clients").textContent = String(s.clients);
  $("uptime").textContent = fmtAge(s.now - s.started);
  $("reloaded").textContent =
    fmtAge(s.now - s.last_reload) + " ago" + (s.reloads_failed ? " (" + s.reloads_failed + " failed)" : "");
  showActions(s);
  showTop(s.top);
  showOverrides(s);
  polls++;
  const u = $("updated");
  u.dataset.polls = String(polls);
  u.textContent = "updated " + new Date(s.now * 1000).toLocaleTimeString();
}

// One read at a time: the next is planned when one ends, so answers come
// in order; pollNow() reads at once (after the read under way, if any).
let inFlight = false;
let again = false;
let timer = null;

async function poll() {
  if (inFlight) {
    again = true;
    return;
  }
  inFlight = true;
  clearTimeout(timer);
  try {
    const r = await fetch("/console/state", { headers: headers(), cache: "no-store" });
    if (!r.ok) throw new Error("the daemon answered " + r.status);
    const s = await r.json();
    $("banner").hidden = true;
    if (s.admin === null && s.admin_why === "invalid token" && token()) {
      // a token rotated away: asking with it again would only count failures
      sessionStorage.removeItem("ratelimitd-token");
      say("error", "the daemon refused the token: enter it again");
    }
    if (!last || s.started !== last.started || s.mono >= last.mono) {
      last = s;
      show(s);
    }
  } catch (e) {
    const b = $("banner");
    b.hidden = false;
    b.textContent = "Cannot read the daemon's state: " + e.message + " (retrying)";
  } finally {
    inFlight = false;
    if (again) {
      again = false;
      poll();
    } else {
      timer = setTimeout(poll, every);
    }
  }
}

function say(kind, text) {
  const m = $("message");
  m.dataset.kind = kind;
  m.textContent = text;
}

async function send(method, params) {
  const init = { method, headers: headers() };
  let url = "/console/overrides";
  if (method === "POST") init.body = params;
  else url += "?" + params.toString();
  let r;
  try {
    r = await fetch(url, init);
  } catch (e) {
    // sent, maybe taken: only the list can say
    throw new Error("no answer (" + e.message + "): see the list for whether it was taken");
  }
  let body = {};
  try {
    body = await r.json();
  } catch (e) {
    body = { message: "the daemon answered " + r.status };
  }
  if (!r.ok) throw new Error(body.message || "the daemon answered " + r.status);
}

async function removeOverride(action, user) {
  try {
    await send("DELETE", new URLSearchParams({ action, user }));
    say("ok", "removed the override of " + user + " on " + action);
  } catch (e) {
    say("error", "not removed: " + e.message);
  }
  poll();
}

$("override-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const user = shown($("ov-user").value);
  const action = $("ov-action").value.trim();
  const p = new URLSearchParams({ action, user, spec: $("ov-spec").value.trim() });
  const ttl = $("ov-ttl").value.trim();
  if (ttl) p.set("ttl", ttl);
  try {
    await send("POST", p);
    say("ok", "set the override of " + user + " on " + action);
  } catch (e) {
    say("error", "not set: " + e.message);
  }
  poll();
});

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem("ratelimitd-token", $("token").value);
  $("token").value = "";
  poll();
});

$("token-forget").addEventListener("click", () => {
  sessionStorage.removeItem("ratelimitd-token");
  poll();
});

$("filter").addEventListener("input", renderActions);

poll();
