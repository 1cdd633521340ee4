// Callers' texts, and offsets into them as JavaScript counts them.

/** One string or an array of strings → { list, single }. */
export function texts(value, method, what = "text") {
  if (typeof value === "string") return { list: [value], single: true };
  if (Array.isArray(value)) {
    value.forEach((v, i) => {
      if (typeof v !== "string") {
        throw new TypeError(`${method}: ${what}[${i}] must be a string (got ${v === null ? "null" : typeof v})`);
      }
    });
    return { list: value, single: false };
  }
  throw new TypeError(`${method}: ${what} must be a string or an array of strings `
    + `(got ${value === null ? "null" : typeof value})`);
}

/**
 * Rust reports character offsets (Unicode scalar values); JavaScript strings index UTF-16 units, where characters
 * outside the Basic Multilingual Plane (most emoji) count twice. Rewrites `obj.start`/`obj.end` in place.
 */
export function toUtf16Span(text, obj) {
  if (!/[\uD800-\uDBFF]/.test(text)) return obj; // no surrogate pairs: the two agree
  const at = (chars) => {
    let units = 0;
    let n = 0;
    for (const ch of text) {
      if (n === chars) break;
      units += ch.length;
      n += 1;
    }
    return units;
  };
  obj.start = at(obj.start);
  obj.end = at(obj.end);
  return obj;
}
