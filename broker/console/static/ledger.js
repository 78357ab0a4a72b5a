// One ledger: its metadata, fragments with ensembles and write sets (zone rule), and its first and last
// entries in hex and UTF-8, as `bookie shell readledger` shows them.

import { get, esc, endpoint, errorBox, fmtNum, fmtBytes, fmtTime, chip, replace } from "./api.js";

function hexDump(hex) {
  const lines = [];
  for (let i = 0; i < hex.length; i += 32) {
    const bytes = hex.slice(i, i + 32).match(/../g).join(" ");
    lines.push(`${(i / 2).toString(16).padStart(6, "0")}  ${bytes}`);
  }
  return lines.join("\n");
}

function metadataHtml(md) {
  const fragments = md.fragments.map((f, i) => `<tr data-fragment="${i}"><td class="num">${fmtNum(f.firstEntryId)}</td>
<td class="num">${f.lastEntryId < f.firstEntryId ? "(open)" : fmtNum(f.lastEntryId)}</td>
<td>${f.ensemble.map((b) => chip(b.bookieId, b.zone)).join("")}</td>
<td>${f.writeSets.map((w) => `<div>${w.bookies.map(esc).join(", ")} → zones ${esc(w.zones.join(", ") || "none")}
${w.meetsZoneRule ? '<span class="ok">✓</span>' : '<span class="bad">✗ fewer than ' + md.zonesNeededPerWriteSet + " zones</span>"}</div>`).join("")}</td></tr>`);
  return `<dl class="cards">
<div class="card"><div class="v" id="ledger-state">${esc(md.state)}</div><div class="k">state</div></div>
<div class="card"><div class="v">${md.ensembleSize} / ${md.writeQuorumSize} / ${md.ackQuorumSize}</div><div class="k">ensemble / write quorum / ack quorum</div></div>
<div class="card"><div class="v">${md.lastEntryId < 0 ? "–" : fmtNum(md.lastEntryId)}</div><div class="k">last entry id (closed ledgers)</div></div>
<div class="card"><div class="v">${fmtBytes(md.length)}</div><div class="k">length</div></div>
<div class="card"><div class="v">${md.meetsZoneRule ? '<span class="ok">met</span>' : '<span class="bad">not met</span>'}</div>
<div class="k">zone rule (${md.zonesNeededPerWriteSet} zones per write set)</div></div>
<div class="card"><div class="v" style="font-size:0.95rem">${esc(fmtTime(md.ctime))}</div><div class="k">created</div></div></dl>
<h3>Fragments</h3><table id="fragments"><thead><tr><th class="num">First entry</th><th class="num">Last entry</th><th>Ensemble (bookie ids, coloured by zone)</th>
<th>Write sets</th></tr></thead><tbody>${fragments.join("")}</tbody></table>
${Object.keys(md.customMetadata || {}).length ? `<h3>Custom metadata</h3><pre>${esc(JSON.stringify(md.customMetadata, null, 2))}</pre>` : ""}`;
}

function entryHtml(e) {
  return `<p>entry <strong class="mono">${e.entryId}</strong> of ${e.ledgerId} (last add confirmed ${e.lastAddConfirmed}),
${fmtNum(e.size)} bytes${e.truncated ? ", the first 4 KiB shown" : ""}</p>
<h4>UTF-8${e.utf8Valid ? "" : " (bytes that are not UTF-8 shown as �)"}, control characters as ·</h4>
<pre class="entry-utf8">${esc(e.utf8.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, "·"))}</pre>
<h4>Hex</h4><pre class="entry-hex">${esc(hexDump(e.hex))}</pre>`;
}

export function ledgerView(el, params, parts) {
  const id = parts[0];
  const path = `/admin/magnetar/v1/ledgers/${encodeURIComponent(id)}`;
  el.innerHTML = `<h2 id="page-title">Ledger <span class="mono">${esc(id)}</span></h2>
<p><a href="javascript:history.back()">← back</a></p>
<section class="panel" aria-labelledby="md-h"><h3 id="md-h">Metadata</h3>${endpoint("GET " + path)}<div id="ledger-md">loading…</div></section>
<section class="panel" aria-labelledby="entries-h"><h3 id="entries-h">Entries</h3>${endpoint(`GET ${path}/entries/first|last|{entryId}`)}
<div class="actions"><button type="button" id="read-first">Read first entry</button><button type="button" id="read-last">Read last entry</button></div>
<div id="entry" aria-live="polite"></div></section>`;
  const read = async (which) => {
    const target = document.getElementById("entry");
    target.textContent = "reading…";
    try {
      target.innerHTML = entryHtml(await get(`${path}/entries/${which}`));
    } catch (exc) {
      target.innerHTML = errorBox(exc);
    }
  };
  document.getElementById("read-first").onclick = () => read("first");
  document.getElementById("read-last").onclick = () => read("last");
  return {
    async refresh() {
      try {
        replace(document.getElementById("ledger-md"), metadataHtml(await get(path)));
      } catch (exc) {
        replace(document.getElementById("ledger-md"), errorBox(exc));
      }
    },
  };
}
