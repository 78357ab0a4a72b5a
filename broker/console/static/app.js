// The console's router and poller: a hash route picks a view; the view's refresh() runs now and every
// POLL_MS while it is shown (never two at once), so pages update without reloading.

import { setToken, token } from "./api.js";
import { clusterView } from "./cluster.js";
import { namespaceView } from "./namespace.js";
import { topicView } from "./topic.js";
import { ledgerView } from "./ledger.js";
import { metadataView } from "./metadata.js";

const POLL_MS = 3000;
const ROUTES = { cluster: clusterView, topics: namespaceView, topic: topicView, ledger: ledgerView, metadata: metadataView };

let current = null;
let timer = null;
let generation = 0;

function parse() {
  const hash = location.hash.replace(/^#\/?/, "") || "cluster";
  const [route, query = ""] = hash.split("?");
  const [name, ...parts] = route.split("/").map(decodeURIComponent);
  return { name: ROUTES[name] ? name : "cluster", parts, params: new URLSearchParams(query) };
}

async function tick(mine) {
  if (mine !== generation || !current) return;
  try {
    await current.refresh();
    if (mine === generation) {
      document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    }
  } catch (exc) {
    // A view reports its own request failures in place; anything else is a bug: shown here and logged.
    document.getElementById("updated").textContent = `refresh failed: ${exc.message || exc}`;
    console.error("console refresh failed", exc);
  } finally {
    if (mine === generation) timer = setTimeout(() => tick(mine), POLL_MS);
  }
}

function show() {
  clearTimeout(timer);
  generation += 1;
  const { name, parts, params } = parse();
  for (const a of document.querySelectorAll("[data-nav]")) {
    const active = a.dataset.nav === name || (name === "topic" && a.dataset.nav === "topics") ||
      (name === "ledger" && a.dataset.nav === "topics");
    if (active) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const main = document.getElementById("view");
  document.body.dataset.view = name;
  document.body.dataset.refreshed = "0";
  current = ROUTES[name](main, params, parts);
  document.title = `${name[0].toUpperCase()}${name.slice(1)} · Magnetar console`;
  tick(generation);
}

const input = document.getElementById("auth-token");
input.value = token();
input.addEventListener("change", () => { setToken(input.value.trim()); show(); });
document.getElementById("auth").addEventListener("submit", (e) => { e.preventDefault(); setToken(input.value.trim()); show(); });
window.addEventListener("hashchange", show);
show();
