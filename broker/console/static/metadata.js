// The metadata store's tree (ZooKeeper or the embedded store), read-only: a node's decoded data, version,
// ephemeral flag, and a page of its children.

import { get, esc, seg, endpoint, errorBox, fmtNum, fmtTime, replace } from "./api.js";

const PAGE = 200;

function crumbs(path) {
  const parts = path.split("/").filter(Boolean);
  const links = ['<a href="#/metadata?path=%2F">/</a>'];
  parts.forEach((p, i) => {
    const to = "/" + parts.slice(0, i + 1).join("/");
    links.push(`<a href="#/metadata?path=${seg(to)}">${esc(p)}</a>`);
  });
  return links.join(" / ");
}

function nodeHtml(node) {
  const child = (name) => `${node.path === "/" ? "" : node.path}/${name}`;
  const data = node.data;
  const shown = data.encoding === "json" || data.encoding === "msgpack"
    ? JSON.stringify(data.value, null, 2) : data.value === null ? "" : String(data.value);
  const facts = node.version === undefined ? "" : `<p>version <strong id="node-version">${node.version}</strong> ·
${node.ephemeral ? `<span class="badge amber" id="node-ephemeral">ephemeral</span> owner ${esc(node.ephemeralOwner)}` : '<span id="node-ephemeral">persistent</span>'}
· modified ${esc(fmtTime(node.modified))} · ${fmtNum(data.size)} bytes, ${esc(data.encoding)}${data.truncated ? " (cut)" : ""}</p>`;
  return `<p class="crumbs" id="crumbs">${crumbs(node.path)}</p>${facts}
${data.encoding === "empty" ? '<p class="muted">no data</p>' : `<pre id="node-data">${esc(shown)}</pre>`}
<h3>Children <span class="muted">(${fmtNum(node.childrenTotal)})</span></h3>
<ul class="children" id="children">${node.children.map((c) => `<li><a href="#/metadata?path=${seg(child(c))}">${esc(c)}</a></li>`).join("")}</ul>
${node.childrenTotal > node.offset + node.children.length ? `<p><a href="#/metadata?path=${seg(node.path)}&offset=${node.offset + PAGE}">next ${PAGE} children</a></p>` : ""}`;
}

export function metadataView(el, params) {
  const path = params.get("path") || "/";
  const offset = Number(params.get("offset") || 0);
  const api = `/admin/magnetar/v1/metadata?path=${seg(path)}&offset=${offset}&limit=${PAGE}`;
  el.innerHTML = `<h2 id="page-title">Metadata <span class="mono">${esc(path)}</span></h2>
<section class="panel" aria-labelledby="node-h"><h3 id="node-h">Node (read-only)</h3>${endpoint("GET /admin/magnetar/v1/metadata?path=…&offset&limit")}
<div id="node">loading…</div></section>`;
  return {
    async refresh() {
      try {
        replace(document.getElementById("node"), nodeHtml(await get(api)));
      } catch (exc) {
        replace(document.getElementById("node"), errorBox(exc));
      }
    },
  };
}
