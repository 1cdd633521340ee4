// The example data and the formats of training examples the page reads: pure functions (tests/node/demo.test.mjs
// runs them in Node.js), apart from `exampleData`'s fetch.

export const EXAMPLE_DATA = "/tests/data/fortunes/train.jsonl";

/** The example data's text (JSON lines of { text, label }). */
export async function exampleData() {
  const res = await fetch(EXAMPLE_DATA);
  if (!res.ok) throw new Error(`${EXAMPLE_DATA}: HTTP ${res.status}`);
  return res.text();
}

/** The pre-training panel's example: the quotations (JSON lines), each a document of its sentences (one a line). */
export function corpusOf(jsonl) {
  return jsonl.split("\n").filter((l) => l.trim())
    .map((l) => JSON.parse(l).text.split(/(?<=[.!?])\s+/).join("\n")).join("\n\n");
}

/** One CSV record per line, RFC 4180 quoting ("" inside quotes). */
export function csvRows(text, sep) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === "\"" && text[i + 1] === "\"") { field += "\""; i++; }
      else if (c === "\"") quoted = false;
      else field += c;
    } else if (c === "\"" && field === "") quoted = true;
    else if (c === sep) { row.push(field); field = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(field); rows.push(row); row = []; field = "";
    } else field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  return rows.filter((r) => r.some((f) => f.trim() !== ""));
}

/**
 * The examples in `text`: JSON lines ({"text", "label"}), CSV/TSV with a header naming `text` and `label`, or
 * `label: text` lines. Throws with the line number of the first line it cannot read.
 */
export function parseExamples(text, fileName = "") {
  const trimmed = text.trim();
  if (!trimmed) return [];
  if (trimmed.startsWith("{")) {
    return trimmed.split("\n").filter((l) => l.trim()).map((line, i) => {
      let o;
      try { o = JSON.parse(line); } catch { throw new Error(`line ${i + 1} is not JSON`); }
      if (typeof o.text !== "string" || (typeof o.label !== "string" && typeof o.label !== "number")) {
        throw new Error(`line ${i + 1} needs "text" and "label"`);
      }
      return { text: o.text, label: String(o.label) };
    });
  }
  const sep = fileName.endsWith(".tsv") ? "\t" : fileName.endsWith(".csv") ? "," : null;
  if (sep) {
    const rows = csvRows(trimmed, sep);
    const header = rows[0].map((h) => h.trim().toLowerCase());
    const ti = header.indexOf("text"), li = header.indexOf("label");
    if (ti < 0 || li < 0) throw new Error(`the first row must name the columns "text" and "label" (got ${rows[0].join(", ")})`);
    return rows.slice(1).map((r, i) => {
      if (r[ti] == null || r[li] == null) throw new Error(`row ${i + 2} has fewer columns than the header`);
      return { text: r[ti], label: r[li].trim() };
    });
  }
  return trimmed.split("\n").map((l) => l.trim()).filter(Boolean).map((line, i) => {
    const k = line.indexOf(":");
    if (k <= 0) throw new Error(`line ${i + 1} should read "label: text"`);
    return { label: line.slice(0, k).trim(), text: line.slice(k + 1).trim() };
  });
}

export function examplesToText(examples) {
  return examples.map((e) => `${e.label}: ${e.text.replace(/\s+/g, " ")}`).join("\n");
}
