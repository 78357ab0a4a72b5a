// The console's one way to talk to the broker: every number on the page comes through get(), every action
// through act(), which asks for confirmation, calls an existing admin route and shows the result.

const TOKEN_KEY = "magnetar.console.token";

export class ApiError extends Error {
  constructor(status, reason, path) {
    super(`HTTP ${status} from ${path}: ${reason}`);
    this.status = status;
  }
}

function headers(extra = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

async function reasonOf(response) {
  const text = await response.text();
  try {
    return JSON.parse(text).reason || text;
  } catch (_) {
    return text;
  }
}

export async function get(path) {
  const response = await fetch(path, { headers: headers(), cache: "no-store" });
  if (!response.ok) throw new ApiError(response.status, await reasonOf(response), path);
  return response.json();
}

export async function call(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  try {
    const response = await fetch(path, init);
    return { ok: response.ok, status: response.status, reason: response.ok ? "" : await reasonOf(response) };
  } catch (exc) {
    return { ok: false, status: 0, reason: String(exc) };
  }
}

export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export function seg(value) {
  return encodeURIComponent(value);
}

export function fmtNum(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

// "1 entry", "2 entries": a count with its noun (the plural given when it is not the noun plus "s").
export function plural(n, one, many = `${one}s`) {
  return `${fmtNum(n)} ${n === 1 ? one : many}`;
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export function fmtTime(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "–";
}

// A zone's colour class (z0..z4), the same for a zone name wherever it is drawn.
export function zoneClass(zone) {
  if (!zone) return "";
  let h = 0;
  for (const c of zone) h = (h * 31 + c.charCodeAt(0)) % 9973;
  return `z${h % 5}`;
}

export function chip(bookieId, zone) {
  const title = zone ? `zone ${zone}` : "zone unknown: not registered";
  return `<span class="chip ${zoneClass(zone)}" data-bookie-id="${esc(bookieId)}" title="${esc(title)}">${esc(bookieId)}</span>`;
}

export function endpoint(text) {
  return `<p class="endpoint">${esc(text)}</p>`;
}

export function errorBox(exc) {
  return `<p class="error" role="alert">${esc(exc.message || exc)}</p>`;
}

let toastTimer = null;

export function toast(text, failed = false) {
  const el = document.getElementById("toast");
  el.textContent = text;
  el.className = failed ? "toast failed" : "toast";
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, 10000);
}

function confirmDialog(text, what) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-endpoint").textContent = what;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

// Ask, then call an admin route and show what it answered. Returns whether it succeeded.
export async function act({ title, text, method, path, body, onDone }) {
  const what = `${method} ${path}${body === undefined ? "" : " " + JSON.stringify(body)}`;
  if (!(await confirmDialog(text, what))) return false;
  const result = await call(method, path, body);
  toast(`${title}: ${result.ok ? "done" : "failed"} (HTTP ${result.status})${result.reason ? " – " + result.reason : ""}`,
    !result.ok);
  if (onDone) onDone(result);
  return result.ok;
}

// Replace a region's content on a poll without closing what the reader opened (details keyed by data-key).
export function replace(target, html) {
  if (!target) return;
  const open = new Set([...target.querySelectorAll("details[open][data-key]")].map((d) => d.dataset.key));
  target.innerHTML = html;
  for (const d of target.querySelectorAll("details[data-key]")) if (open.has(d.dataset.key)) d.open = true;
}
