// The cluster page: health with reasons, brokers (bundles, load, leader), bookies by zone and upgrade domain.

import { get, esc, endpoint, errorBox, fmtNum, fmtBytes, plural, replace, zoneClass } from "./api.js";

const HEALTH = "/admin/magnetar/v1/health";
const BROKERS = "/admin/magnetar/v1/brokers";
const BOOKIES = "/admin/magnetar/v1/bookies";

function healthHtml(h) {
  const words = { green: "Healthy", amber: "Degraded", red: "Failing" };
  const items = h.findings.map((f) =>
    `<li><span class="badge ${esc(f.level)}">${esc(f.level)}</span> <strong>${esc(f.subject)}</strong>: ${esc(f.reason)}</li>`);
  return `<p><span class="badge ${esc(h.status)}" id="health-status">${esc(words[h.status] || h.status)}</span>
${h.findings.length ? "" : " nothing needs attention"}</p>${items.length ? `<ul>${items.join("")}</ul>` : ""}`;
}

function brokersHtml(doc) {
  const rows = doc.brokers.map((b) => `<tr data-broker-id="${esc(b.brokerId)}">
<td class="mono">${esc(b.brokerId)}${b.leader ? ' <span class="badge green">leader</span>' : ""}${b.thisBroker ? ' <span class="muted">(this one)</span>' : ""}</td>
<td class="mono hide-narrow">${esc(b.nativeUrl || "")}<br>${esc(b.httpUrl || "")}</td>
<td class="num">${fmtNum(b.numTopics)}</td><td class="num">${fmtNum(b.numConnections)}</td>
<td class="num">${fmtNum(b.msgRateIn, 1)}</td><td class="num">${fmtNum(b.msgRateOut, 1)}</td>
<td class="num">${fmtNum(b.cpu ? b.cpu.usage : null, 0)} %</td>
<td><details data-key="${esc(b.brokerId)}"><summary>${plural(b.numBundles, "bundle")}</summary><ul class="mono">${(b.bundles || []).map((x) => `<li>${esc(x)}</li>`).join("")}</ul></details></td></tr>`);
  return `<table><thead><tr><th>Broker</th><th class="hide-narrow">URLs</th><th class="num">Topics</th>
<th class="num">Connections</th><th class="num">Msg/s in</th><th class="num">Msg/s out</th><th class="num">CPU</th>
<th>Bundles</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

function meter(fraction) {
  if (fraction === null || fraction === undefined) return '<span class="muted">disk: unknown</span>';
  const level = fraction >= 0.95 ? "red" : fraction >= 0.85 ? "amber" : "";
  const pct = Math.round(fraction * 100);
  return `<div class="meter ${level}" role="meter" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${pct}"
aria-label="disk used"><span style="width:${pct}%"></span></div>`;
}

function bookieHtml(b) {
  const fsync = b.journalFsyncLatency || {};
  const disk = b.diskTotalBytes ? ` of ${fmtBytes(b.diskTotalBytes)} (${fmtBytes(b.diskFreeBytes)} free)` : "";
  return `<div class="bookie" data-bookie-id="${esc(b.bookieId)}" data-zone="${esc(b.zone || "")}" data-state="${esc(b.state)}">
<div><strong class="mono">${esc(b.bookieId)}</strong> <span class="badge ${esc(b.state)}">${esc(b.state)}</span>
${b.state === "readonly" && b.stateReason ? `<span class="muted">${esc(b.stateReason)}</span>` : ""}</div>
<div class="muted mono">${esc(b.address || "")}</div>
${b.state === "down" ? "" : `${meter(b.diskUsage)}<div class="muted">disk ${b.diskUsage == null ? "–" : Math.round(b.diskUsage * 100) + " % used"}${disk}</div>
<div class="muted">journal fsync p50 ${fmtNum(fsync.p50_ms, 2)} ms, p99 ${fmtNum(fsync.p99_ms, 2)} ms (last ${fmtNum(fsync.count)})
· ${plural(b.ledgers, "ledger")}</div>`}
${b.infoError ? `<div class="error">${esc(b.infoError)}</div>` : ""}</div>`;
}

function bookiesHtml(doc) {
  const zones = new Map();
  for (const b of doc.bookies) {
    const zone = b.zone || "(unknown zone)";
    if (!zones.has(zone)) zones.set(zone, new Map());
    const uds = zones.get(zone);
    const ud = b.upgradeDomain || "(unknown)";
    if (!uds.has(ud)) uds.set(ud, []);
    uds.get(ud).push(b);
  }
  const cards = [...zones].map(([zone, uds]) => `<div class="zone ${zoneClass(zone)}" data-zone="${esc(zone)}">
<h3>${esc(zone)} <span class="muted">(zone)</span></h3>${[...uds].map(([ud, list]) =>
    `<h4 class="muted">upgrade domain ${esc(ud)}</h4>${list.map(bookieHtml).join("")}`).join("")}</div>`);
  const marked = doc.underReplicated || { count: 0, ledgers: [] };
  const under = marked.count
    ? `<h3>Under-replicated ledgers <span class="badge amber" id="under-replicated">${fmtNum(marked.count)}</span></h3>
<table><thead><tr><th>Ledger</th><th>Missing from</th><th>To replace</th></tr></thead><tbody>${marked.ledgers.map((l) =>
      `<tr><td><a href="#/ledger/${l.ledgerId}">${l.ledgerId}</a></td><td class="mono">${esc(l.missing.join(", ") || "–")}</td>
<td class="mono">${esc(l.replace.join(", ") || (l.check ? "(check)" : "–"))}</td></tr>`).join("")}</tbody></table>`
    : '<p class="muted" id="under-replicated">no under-replicated ledger</p>';
  return `<div class="zones">${cards.join("") || '<p class="muted">no bookie is registered</p>'}</div>${under}`;
}

export function clusterView(el) {
  el.innerHTML = `<h2 id="page-title">Cluster</h2>
<section class="panel health" id="health" aria-labelledby="health-h"><h3 id="health-h">Health</h3>${endpoint("GET " + HEALTH)}
<div id="health-body" aria-live="polite">loading…</div></section>
<section class="panel" aria-labelledby="brokers-h"><h3 id="brokers-h">Brokers</h3>${endpoint("GET " + BROKERS)}
<div id="brokers">loading…</div></section>
<section class="panel" aria-labelledby="bookies-h"><h3 id="bookies-h">Bookies by zone and upgrade domain</h3>${endpoint("GET " + BOOKIES)}
<div id="bookies">loading…</div></section>`;
  const parts = [
    [HEALTH, "health-body", (d) => { document.getElementById("health").className = `panel health ${d.status}`; return healthHtml(d); }],
    [BROKERS, "brokers", brokersHtml],
    [BOOKIES, "bookies", bookiesHtml],
  ];
  return {
    async refresh() {
      await Promise.all(parts.map(async ([path, id, render]) => {
        const target = document.getElementById(id);
        try {
          const html = render(await get(path));
          replace(target, html);
        } catch (exc) {
          if (target) target.innerHTML = errorBox(exc);
        }
      }));
    },
  };
}
