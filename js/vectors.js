// The embedding tasks' work on the wasm model (`m`), apart from Bert's queue: `embed` (its batches, then its
// `precision`), `embedSparse` (SPLADE) and `embedTokens` (one vector per token). Rust: src/wasm/vectors.rs.

import { checkEmbedOptions, checkOptions, DEFAULT_BATCH_SIZE, flags, positiveInt, promptName } from "./options.js";
import { texts } from "./text.js";

export async function embed(m, input, options) {
  const { list, single } = texts(input, "embed");
  const { pooling, normalize, prompt, dimensions, batchSize, precision, ranges } = checkEmbedOptions(options);
  const out = [];
  for (let i = 0; i < list.length; i += batchSize) {
    const chunk = list.slice(i, i + batchSize);
    const flat = await m.embed(chunk, pooling ?? undefined, normalize ?? undefined, prompt ?? undefined,
      dimensions ?? undefined); // (n, width)
    const h = flat.length / chunk.length;
    for (let j = 0; j < chunk.length; j++) out.push(flat.slice(j * h, (j + 1) * h));
  }
  if (precision == null || precision === "float32" || !out.length) return single ? out[0] : out;
  // The whole call's vectors at once: int8/uint8 without ranges take theirs from all of them.
  const w = out[0].length;
  const flat = new Float32Array(out.length * w);
  out.forEach((v, i) => flat.set(v, i * w));
  const codes = m.quantize(flat, out.length, precision, ranges ? Float32Array.from(ranges[0]) : undefined,
    ranges ? Float32Array.from(ranges[1]) : undefined);
  const cw = codes.length / out.length;
  const coded = out.map((_, i) => codes.slice(i * cw, (i + 1) * cw));
  return single ? coded[0] : coded;
}

export async function embedSparse(m, input, options) {
  const { list, single } = texts(input, "embedSparse");
  const opts = checkOptions(options, ["prompt", "maxActiveDims", "batchSize"], "embedSparse");
  const prompt = promptName("embedSparse", opts.prompt);
  const maxActive = opts.maxActiveDims == null ? undefined : positiveInt(opts.maxActiveDims, "embedSparse", "maxActiveDims");
  const batchSize = positiveInt(opts.batchSize ?? DEFAULT_BATCH_SIZE, "embedSparse", "batchSize");
  const out = [];
  for (let i = 0; i < list.length; i += batchSize) {
    out.push(...await m.embedSparse(list.slice(i, i + batchSize), prompt, maxActive));
  }
  return single ? out[0] : out;
}

export async function embedTokens(m, input, options) {
  const { list, single } = texts(input, "embedTokens");
  const opts = checkOptions(options, ["prompt", "normalize", "batchSize"], "embedTokens");
  const prompt = promptName("embedTokens", opts.prompt);
  flags("embedTokens", opts, ["normalize"]);
  const batchSize = positiveInt(opts.batchSize ?? DEFAULT_BATCH_SIZE, "embedTokens", "batchSize");
  const out = [];
  for (let i = 0; i < list.length; i += batchSize) {
    for (const t of await m.embedTokens(list.slice(i, i + batchSize), prompt, opts.normalize === true)) {
      // One view per token of the text's one buffer.
      const vectors = Array.from(t.ids, (_, k) => t.vectors.subarray(k * t.dims, (k + 1) * t.dims));
      out.push({ tokens: t.tokens, ids: t.ids, offsets: t.offsets, vectors });
    }
  }
  return single ? out[0] : out;
}
