// A loss and accuracy chart (SVG), for the training panels.
const SVG = "http://www.w3.org/2000/svg";

/**
 * Loss (solid, left axis scaled to the largest loss) and accuracy (dashed, 0–1) of `history`'s points, each at its
 * `epoch` (or step) on an x axis up to `last`. `fromZero`: the x axis starts at 0, for points within epochs
 * (whole-model training plots every step at its fraction of an epoch); `unit` names the x axis.
 */
export function drawChart(svg, history, last, { fromZero = false, unit = "epoch" } = {}) {
  const W = 600, H = 200, L = 36, R = 10, T = 10, B = 24;
  const maxLoss = Math.max(...history.flatMap((h) => [h.loss ?? 0, h.valLoss ?? 0]), 1e-6);
  const x0 = fromZero ? 0 : 1;
  const x = (e) => L + ((e - x0) / Math.max(1, last - x0)) * (W - L - R);
  const yl = (v) => T + (1 - v / maxLoss) * (H - T - B);
  const ya = (v) => T + (1 - v) * (H - T - B);
  const path = (key, y) => history.filter((h) => h[key] != null)
    .map((h, i) => `${i ? "L" : "M"}${x(h.epoch).toFixed(1)},${y(h[key]).toFixed(1)}`).join("");
  const parts = [
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" class="axis"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" class="axis"/>`,
    `<text x="${L - 4}" y="${T + 8}" text-anchor="end">${maxLoss.toFixed(2)}</text>`,
    `<text x="${L - 4}" y="${H - B}" text-anchor="end">0</text>`,
    `<text x="${W - R}" y="${H - 6}" text-anchor="end">${unit} ${Math.ceil(history.at(-1)?.epoch ?? 0)} / ${last}</text>`,
    `<path d="${path("loss", yl)}" class="train"/>`,
    `<path d="${path("valLoss", yl)}" class="val"/>`,
    `<path d="${path("accuracy", ya)}" class="train acc"/>`,
    `<path d="${path("valAccuracy", ya)}" class="val acc"/>`,
  ];
  svg.innerHTML = parts.join("");
  const point = history.findLast((h) => h.loss != null);
  svg.setAttribute("aria-label", point
    ? `${unit[0].toUpperCase()}${unit.slice(1)} ${Math.ceil(point.epoch)}: loss ${point.loss.toFixed(3)}`
      + (point.accuracy != null ? `, accuracy ${(point.accuracy * 100).toFixed(0)}%` : "")
    : "No training yet");
  svg.setAttribute("xmlns", SVG);
}
