// Line charts drawn as SVG by hand (no library): series of [time ms, value] over a fixed time window.

import { esc, fmtNum } from "./api.js";

const W = 480;
const H = 160;
const PAD = { left: 46, right: 8, top: 8, bottom: 20 };

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// series: [{ name, color, points: [[tMs, value], ...] }]; windowMs: how much time the x axis spans.
export function lineChart(title, series, windowMs, now, unit = "") {
  const x0 = now - windowMs;
  const all = series.flatMap((s) => s.points.map((p) => p[1]));
  const yMax = niceMax(Math.max(0, ...all));
  const px = (t) => PAD.left + ((t - x0) / windowMs) * (W - PAD.left - PAD.right);
  const py = (v) => H - PAD.bottom - (v / yMax) * (H - PAD.top - PAD.bottom);
  const lines = series.map((s) => {
    const pts = s.points.filter((p) => p[0] >= x0).map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`);
    return pts.length
      ? `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts.join(" ")}"><title>${esc(s.name)}</title></polyline>`
      : "";
  });
  const ticks = [0, 0.5, 1].map((f) => {
    const y = py(yMax * f).toFixed(1);
    return `<line class="axis" x1="${PAD.left}" x2="${W - PAD.right}" y1="${y}" y2="${y}" stroke-dasharray="${f ? "2 3" : ""}"/>` +
      `<text x="${PAD.left - 4}" y="${y}" text-anchor="end" dominant-baseline="middle">${fmtNum(yMax * f, yMax < 10 ? 1 : 0)}</text>`;
  });
  const minutes = Math.round(windowMs / 60000);
  const last = series.map((s) => {
    const p = s.points[s.points.length - 1];
    return `<span><i style="background:${s.color}"></i>${esc(s.name)}: ${p ? fmtNum(p[1], 1) : "–"}${esc(unit)}</span>`;
  });
  return `<figure class="chartbox"><figcaption><strong>${esc(title)}</strong> <span class="muted">(last ${minutes} min)</span></figcaption>
<svg class="chart" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img" aria-label="${esc(title)}">
${ticks.join("")}
<line class="axis" x1="${PAD.left}" x2="${PAD.left}" y1="${PAD.top}" y2="${H - PAD.bottom}"/>
<text x="${PAD.left}" y="${H - 4}">-${minutes} min</text><text x="${W - PAD.right}" y="${H - 4}" text-anchor="end">now</text>
${lines.join("")}
</svg><div class="legend">${last.join("")}</div></figure>`;
}
