// One topic: counters and rates (rates from the difference between two polls), a live chart, its
// subscriptions with their cursors, the actions, and its managed ledger as a chain of ledgers.

import { get, act, esc, seg, endpoint, errorBox, fmtNum, fmtBytes, fmtTime, chip, plural, replace } from "./api.js";
import { lineChart } from "./charts.js";

const WINDOW_MS = 5 * 60 * 1000;

function card(key, value, id) {
  return `<div class="card"><div class="v" id="${id}">${value}</div><div class="k">${esc(key)}</div></div>`;
}

function subscriptionsHtml(stats, internal) {
  const cursors = internal.cursors || {};
  const names = Object.keys(stats.subscriptions || {}).sort();
  if (!names.length) return '<p class="muted">no subscriptions</p>';
  const rows = names.map((name) => {
    const s = stats.subscriptions[name];
    const c = cursors[name] || {};
    const consumers = (s.consumers || []).length;
    return `<tr data-subscription="${esc(name)}"><td class="mono">${esc(name)}</td><td>${esc(s.type || "–")}${s.isDurable === false ? " (non-durable)" : ""}</td>
<td class="num">${fmtNum(s.msgBacklog)}</td><td class="num">${fmtNum(s.unackedMessages)}</td>
<td class="mono">${esc(c.markDeletePosition || "–")}</td><td class="mono hide-narrow">${esc(c.readPosition || "–")}</td>
<td class="num">${fmtNum(c.totalNonContiguousDeletedMessagesRange)}</td><td class="num">${fmtNum(consumers)}</td>
<td><button type="button" data-sub="${esc(name)}" data-act="clear">Clear backlog</button>
<button type="button" data-sub="${esc(name)}" data-act="reset">Reset cursor</button>
<button type="button" data-sub="${esc(name)}" data-act="delete" class="danger">Delete</button></td></tr>`;
  });
  return `<table><thead><tr><th>Subscription</th><th>Type</th><th class="num">Backlog</th><th class="num">Unacked</th>
<th>Mark-delete</th><th class="hide-narrow">Read position</th><th class="num">Acked ranges</th><th class="num">Consumers</th>
<th>Actions</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

// One line per fragment: its entry range, its ensemble (bookie ids coloured by zone) and whether every write
// set of it spans the zones the rule needs.
function fragmentsHtml(md) {
  const items = md.fragments.map((f) => {
    const range = f.lastEntryId < f.firstEntryId ? `${fmtNum(f.firstEntryId)} onwards` : `${fmtNum(f.firstEntryId)}–${fmtNum(f.lastEntryId)}`;
    const rule = f.meetsZoneRule ? '<span class="ok" title="every write set meets the zone rule">✓</span>'
      : `<span class="bad" title="a write set spans fewer than ${md.zonesNeededPerWriteSet} zones">✗</span>`;
    return `<li class="fragment" data-first-entry="${f.firstEntryId}" data-meets-zone-rule="${f.meetsZoneRule}">
<span class="muted">entries ${range}</span> ${f.ensemble.map((b) => chip(b.bookieId, b.zone)).join("")} ${rule}</li>`;
  });
  return `<ul class="fragments">${items.join("")}</ul>`;
}

function chainHtml(doc) {
  if (!doc.ledgers.length) return '<p class="muted">no ledger yet</p>';
  const boxes = doc.ledgers.map((l) => {
    const md = l.metadata;
    const rule = !md ? "" : md.meetsZoneRule
      ? '<span class="ok">zone rule met</span>' : '<span class="bad">zone rule NOT met</span>';
    return `<div class="ledger" data-ledger-id="${l.ledgerId}" data-entries="${l.entries}" data-state="${esc(md ? md.state : "deleted")}">
<div><a class="ledger-link" href="#/ledger/${l.ledgerId}">ledger ${l.ledgerId}</a>
<span class="badge ${md && md.state === "CLOSED" ? "" : "green"}">${esc(md ? md.state : "no metadata")}</span></div>
<div class="muted">${plural(l.entries, "entry", "entries")} · ${fmtBytes(l.size)} · ${plural(md ? md.fragments.length : 0, "fragment")}</div>
${md ? fragmentsHtml(md) : ""}<div>${rule}</div></div>`;
  });
  const more = doc.total > doc.ledgers.length ? `<p class="muted">the newest ${doc.ledgers.length} of ${doc.total} ledgers</p>` : "";
  return `${more}<div class="chain" id="chain">${boxes.join('<span class="arrow" aria-hidden="true">→</span>')}</div>
<p class="muted">last confirmed entry <span class="mono" id="lac">${esc(doc.lastConfirmedEntry)}</span>${doc.terminated ? " · terminated" : ""}</p>`;
}

export function topicView(el, params, parts) {
  const [tenant, namespace, local] = parts;
  const name = `persistent://${tenant}/${namespace}/${local}`;
  const base = `/admin/v2/persistent/${seg(tenant)}/${seg(namespace)}/${seg(local)}`;
  const ledgers = `/admin/magnetar/v1/persistent/${seg(tenant)}/${seg(namespace)}/${seg(local)}/ledgers`;
  el.innerHTML = `<h2 id="page-title">Topic <span class="mono">${esc(name)}</span></h2>
<p><a href="#/topics?ns=${seg(tenant + "/" + namespace)}">← ${esc(tenant)}/${esc(namespace)}</a></p>
<section class="panel" aria-labelledby="stats-h"><h3 id="stats-h">Now</h3>${endpoint(`GET ${base}/stats`)}
<div class="cards">${card("msg/s in", "–", "rate-in")}${card("msg/s out", "–", "rate-out")}${card("backlog (messages)", "–", "backlog")}
${card("storage", "–", "storage")}${card("producers", "–", "producers")}${card("consumers", "–", "consumers")}
${card("messages in (total)", "–", "msg-in")}${card("messages out (total)", "–", "msg-out")}</div>
<div class="charts" id="charts"></div></section>
<section class="panel" aria-labelledby="actions-h"><h3 id="actions-h">Actions</h3>
<div class="actions"><button type="button" id="action-unload">Unload</button>
<button type="button" id="action-compact">Compact</button>
<button type="button" id="action-terminate" class="danger">Terminate</button>
<label for="new-sub">New subscription<input id="new-sub" maxlength="200"></label>
<button type="button" id="action-create-sub">Create subscription</button></div></section>
<section class="panel" aria-labelledby="subs-h"><h3 id="subs-h">Subscriptions</h3>${endpoint(`GET ${base}/stats · GET ${base}/internalStats`)}
<div class="actions"><label for="reset-minutes">“Reset cursor” goes back this many minutes
<input id="reset-minutes" type="number" min="0" max="100000" step="1" value="10"></label></div>
<div id="subs">loading…</div></section>
<section class="panel" aria-labelledby="storage-h"><h3 id="storage-h">Storage: the managed ledger's chain of ledgers</h3>
${endpoint(`GET ${ledgers}`)}<div id="ledgers">loading…</div></section>`;

  const history = { in: [], out: [], backlog: [] };
  let previous = null;
  const refreshSoon = () => view.refresh();
  document.getElementById("action-unload").onclick = () => act({ title: "Unload", method: "PUT", path: `${base}/unload`,
    text: `Unload ${name}? Its producers and consumers reconnect; the managed ledger closes its ledger and opens a new one.`,
    onDone: refreshSoon });
  document.getElementById("action-compact").onclick = () => act({ title: "Compact", method: "PUT", path: `${base}/compaction`,
    text: `Start compaction of ${name}?`, onDone: refreshSoon });
  document.getElementById("action-terminate").onclick = () => act({ title: "Terminate", method: "POST", path: `${base}/terminate`,
    text: `Terminate ${name}? No message can be published to it afterwards. This cannot be undone.`, onDone: refreshSoon });
  document.getElementById("action-create-sub").onclick = () => {
    const sub = document.getElementById("new-sub").value.trim();
    if (!sub) { document.getElementById("new-sub").focus(); return; }
    act({ title: "Create subscription", method: "PUT", path: `${base}/subscription/${seg(sub)}`,
      text: `Create subscription ${sub} on ${name} at the latest message?`, onDone: refreshSoon });
  };
  document.getElementById("subs").onclick = (e) => {
    const button = e.target.closest("button[data-sub]");
    if (!button) return;
    const sub = button.dataset.sub;
    const path = `${base}/subscription/${seg(sub)}`;
    if (button.dataset.act === "clear") {
      act({ title: "Clear backlog", method: "POST", path: `${path}/skip_all`,
        text: `Skip every message in the backlog of ${sub}?`, onDone: refreshSoon });
    } else if (button.dataset.act === "delete") {
      act({ title: "Delete subscription", method: "DELETE", path,
        text: `Delete subscription ${sub}? Its cursor and backlog are dropped.`, onDone: refreshSoon });
    } else {
      const input = document.getElementById("reset-minutes");
      const minutes = Number(input.value);
      if (!input.value || !Number.isFinite(minutes) || minutes < 0 || minutes > 100000) { input.focus(); return; }
      const ts = Date.now() - Math.round(minutes * 60000);
      act({ title: "Reset cursor", method: "POST", path: `${path}/resetcursor/${ts}`,
        text: `Reset ${sub} to the first message published after ${fmtTime(ts)}?`, onDone: refreshSoon });
    }
  };

  function drawCharts(now) {
    document.getElementById("charts").innerHTML =
      lineChart("Rates in and out", [{ name: "in", color: "#0b55b8", points: history.in },
        { name: "out", color: "#a1121e", points: history.out }], WINDOW_MS, now, " msg/s") +
      lineChart("Backlog", [{ name: "backlog", color: "#7b2e9e", points: history.backlog }], WINDOW_MS, now, " msgs");
  }

  const view = {
    async refresh() {
      const now = Date.now();
      try {
        const [stats, internal] = await Promise.all([get(`${base}/stats`), get(`${base}/internalStats`)]);
        const consumers = Object.values(stats.subscriptions || {}).reduce((n, s) => n + (s.consumers || []).length, 0);
        if (previous && now > previous.t) {
          const dt = (now - previous.t) / 1000;
          history.in.push([now, Math.max(0, (stats.msgInCounter - previous.in) / dt)]);
          history.out.push([now, Math.max(0, (stats.msgOutCounter - previous.out) / dt)]);
        }
        history.backlog.push([now, stats.msgBacklog]);
        for (const k of Object.keys(history)) history[k] = history[k].filter((p) => p[0] >= now - WINDOW_MS);
        previous = { t: now, in: stats.msgInCounter, out: stats.msgOutCounter };
        const rate = (h) => (h.length ? fmtNum(h[h.length - 1][1], 1) : "–");
        const set = (id, v) => { document.getElementById(id).textContent = v; };
        set("rate-in", rate(history.in)); set("rate-out", rate(history.out));
        set("backlog", fmtNum(stats.msgBacklog)); set("storage", fmtBytes(stats.storageSize));
        set("producers", fmtNum((stats.publishers || []).length)); set("consumers", fmtNum(consumers));
        set("msg-in", fmtNum(stats.msgInCounter)); set("msg-out", fmtNum(stats.msgOutCounter));
        drawCharts(now);
        replace(document.getElementById("subs"), subscriptionsHtml(stats, internal));
      } catch (exc) {
        replace(document.getElementById("subs"), errorBox(exc));
      }
      try {
        replace(document.getElementById("ledgers"), chainHtml(await get(ledgers)));
      } catch (exc) {
        replace(document.getElementById("ledgers"), errorBox(exc));
      }
    },
  };
  return view;
}
