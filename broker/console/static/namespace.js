// Tenants -> namespaces -> a page of topics (never the whole namespace), and the namespace's bundles.

import { get, act, esc, seg, endpoint, errorBox, fmtNum, fmtBytes, replace } from "./api.js";

const PAGE = 50;

function topicsHtml(doc, ns) {
  const rows = doc.topics.map((t) => `<tr data-topic="${esc(t.name)}">
<td><a href="#/topic/${ns.split("/").map(seg).join("/")}/${seg(t.localName)}">${esc(t.localName)}</a></td>
<td>${t.loaded ? '<span class="badge green">loaded</span>' : '<span class="muted">not loaded here</span>'}</td>
<td class="num rate-in">${t.loaded ? fmtNum(t.msgRateIn, 1) : "–"}</td><td class="num rate-out">${t.loaded ? fmtNum(t.msgRateOut, 1) : "–"}</td>
<td class="num">${t.loaded ? fmtNum(t.msgBacklog) : "–"}</td><td class="num hide-narrow">${t.loaded ? fmtBytes(t.storageSize) : "–"}</td>
<td class="num hide-narrow">${t.loaded ? fmtNum(t.producers) : "–"}</td><td class="num hide-narrow">${t.loaded ? fmtNum(t.subscriptions) : "–"}</td>
<td class="num hide-narrow">${t.loaded ? fmtNum(t.consumers) : "–"}</td></tr>`);
  const last = Math.min(doc.offset + doc.topics.length, doc.total);
  return `<p id="topics-count">${fmtNum(doc.total)} topics; showing ${doc.total ? doc.offset + 1 : 0}–${last}</p>
<table><thead><tr><th>Topic</th><th>State</th><th class="num">Msg/s in</th><th class="num">Msg/s out</th>
<th class="num">Backlog</th><th class="num hide-narrow">Storage</th><th class="num hide-narrow">Producers</th>
<th class="num hide-narrow">Subscriptions</th><th class="num hide-narrow">Consumers</th></tr></thead><tbody id="topics-rows">${rows.join("")}</tbody></table>`;
}

function bundlesHtml(bundles, owners, ns) {
  const b = bundles.boundaries;
  const rows = [];
  for (let i = 0; i + 1 < b.length; i += 1) {
    const name = `${b[i]}_${b[i + 1]}`;
    rows.push(`<tr data-bundle="${esc(name)}"><td class="mono">${esc(name)}</td><td class="mono owner">${esc(owners.get(`${ns}/${name}`) || "not owned")}</td>
<td><button type="button" data-bundle="${esc(name)}" data-act="unload">Unload</button>
<button type="button" data-bundle="${esc(name)}" data-act="split">Split</button></td></tr>`);
  }
  return `<table><thead><tr><th>Bundle</th><th>Owner</th><th>Actions</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

export function namespaceView(el, params) {
  const ns = params.get("ns") || "public/default";
  let offset = Number(params.get("offset") || 0);
  let filter = params.get("filter") || "";
  const [tenant, namespace] = ns.split("/");
  const base = `/admin/v2/namespaces/${seg(tenant)}/${seg(namespace)}`;
  const topicsPath = () =>
    `/admin/magnetar/v1/namespaces/${seg(tenant)}/${seg(namespace)}/topics?offset=${offset}&limit=${PAGE}&filter=${seg(filter)}`;
  el.innerHTML = `<h2 id="page-title">Topics</h2>
<section class="panel" aria-labelledby="ns-h"><h3 id="ns-h">Namespace</h3>${endpoint("GET /admin/v2/tenants · GET /admin/v2/namespaces/{tenant}")}
<div class="actions"><label for="tenant">Tenant<select id="tenant"></select></label>
<label for="namespace">Namespace<select id="namespace"></select></label>
<label for="filter">Filter topics<input id="filter" type="search" value="${esc(filter)}"></label>
<button type="button" id="ns-clear-backlog" class="danger">Clear backlog of the namespace</button>
<button type="button" id="ns-unload" class="danger">Unload the namespace</button></div><div id="ns-error"></div></section>
<section class="panel" aria-labelledby="topics-h"><h3 id="topics-h">Topics in ${esc(ns)}</h3>
${endpoint(`GET /admin/magnetar/v1/namespaces/${ns}/topics?offset&limit&filter`)}
<div class="pager"><button type="button" id="prev">Previous page</button><button type="button" id="next">Next page</button></div>
<div id="topics">loading…</div></section>
<section class="panel" aria-labelledby="bundles-h"><h3 id="bundles-h">Bundles</h3>
${endpoint(`GET ${base}/bundles · owners from GET /admin/magnetar/v1/brokers`)}<div id="bundles">loading…</div></section>`;

  let total = 0;
  const go = () => { location.hash = `#/topics?ns=${seg(ns)}&offset=${offset}&filter=${seg(filter)}`; };
  document.getElementById("prev").onclick = () => { if (offset > 0) { offset = Math.max(0, offset - PAGE); go(); } };
  document.getElementById("next").onclick = () => { if (offset + PAGE < total) { offset += PAGE; go(); } };
  let typing = null;
  document.getElementById("filter").oninput = (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => { filter = e.target.value; offset = 0; go(); }, 300);
  };
  document.getElementById("ns-clear-backlog").onclick = () => act({
    title: "Clear backlog", text: `Skip every message of every subscription in ${ns}?`,
    method: "POST", path: `${base}/clearBacklog`, onDone: () => view.refresh() });
  document.getElementById("ns-unload").onclick = () => act({
    title: "Unload namespace", text: `Unload every bundle of ${ns} this broker owns?`,
    method: "PUT", path: `${base}/unload`, onDone: () => view.refresh() });
  document.getElementById("bundles").onclick = (e) => {
    const button = e.target.closest("button[data-bundle]");
    if (!button) return;
    const bundle = button.dataset.bundle;
    const unload = button.dataset.act === "unload";
    act({ title: unload ? "Unload bundle" : "Split bundle",
      text: unload ? `Unload bundle ${bundle} of ${ns}? Its topics move to the broker a lookup chooses.`
        : `Split bundle ${bundle} of ${ns} in two (range_equally_divide)?`,
      method: "PUT", path: `${base}/${seg(bundle)}/${unload ? "unload" : "split?unload=false"}`,
      onDone: () => view.refresh() });
  };

  (async () => {
    try {
      const tenants = await get("/admin/v2/tenants");
      const namespaces = await get(`/admin/v2/namespaces/${seg(tenant)}`);
      const tSel = document.getElementById("tenant");
      const nSel = document.getElementById("namespace");
      tSel.innerHTML = tenants.map((t) => `<option ${t === tenant ? "selected" : ""}>${esc(t)}</option>`).join("");
      nSel.innerHTML = namespaces.map((n) => `<option value="${esc(n)}" ${n === ns ? "selected" : ""}>${esc(n.split("/")[1])}</option>`).join("");
      tSel.onchange = async () => {
        const list = await get(`/admin/v2/namespaces/${seg(tSel.value)}`);
        if (list.length) location.hash = `#/topics?ns=${seg(list[0])}`;
      };
      nSel.onchange = () => { location.hash = `#/topics?ns=${seg(nSel.value)}`; };
    } catch (exc) {
      const target = document.getElementById("ns-error");
      if (target) target.innerHTML = errorBox(exc);
    }
  })();

  const view = {
    async refresh() {
      const target = document.getElementById("topics");
      try {
        const doc = await get(topicsPath());
        total = doc.total;
        replace(target, topicsHtml(doc, ns));
        if (!window.consoleTopicsRenderedMs) window.consoleTopicsRenderedMs = performance.now();
      } catch (exc) {
        replace(target, errorBox(exc));
      }
      try {
        // Owners need a superuser; a tenant admin still sees the bundles, with owners unknown.
        const [bundles, brokers] = await Promise.all([get(`${base}/bundles`),
          get("/admin/magnetar/v1/brokers").catch(() => ({ brokers: [] }))]);
        const owners = new Map();
        for (const b of brokers.brokers) for (const x of b.bundles || []) owners.set(x, b.brokerId);
        replace(document.getElementById("bundles"), bundlesHtml(bundles, owners, ns));
      } catch (exc) {
        replace(document.getElementById("bundles"), errorBox(exc));
      }
    },
  };
  return view;
}
