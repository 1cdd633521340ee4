// A model from files the visitor drops or picks: a folder (dragged, or chosen with the folder picker) or loose
// files, as the bytes source Bert.load takes. A folder brings sentence-transformers' files with it (modules.json and
// each module's folder: 1_Pooling/config.json, 2_Dense/model.safetensors, ...), so the dropped model embeds as its
// authors meant it; loose files can only bring the top-level ones (a module's config.json would collide with the
// model's). Pure (Files or Blobs in, bytes out), tested in Node: tests/node/demo.test.mjs.

/** sentence-transformers' top-level files (js/loader.js SENTENCE_FILES). */
const SENTENCE_FILES = ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"];
/** A dragged folder is read this deep and this wide at most (a model folder is two levels, a few dozen files). */
const MAX_DEPTH = 2;
const MAX_FILES = 256;

/** The path below the picked folder (`webkitRelativePath` "folder/1_Pooling/config.json"), or the bare name. */
export function relativePath(file) {
  const rel = file.webkitRelativePath;
  return rel ? rel.split("/").slice(1).join("/") : file.name;
}

/** A dragged folder's files as [{ path, file }] (paths below it), through the entries API; bounded. */
export async function folderEntries(root) {
  const out = [];
  const walk = async (dir, prefix, depth) => {
    const reader = dir.createReader();
    for (;;) {
      const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
      if (!batch.length) return;
      for (const e of batch) {
        if (out.length >= MAX_FILES) throw new Error(`the dropped folder holds more than ${MAX_FILES} files: drop the model's folder`);
        if (e.isFile) out.push({ path: prefix + e.name, file: await new Promise((resolve, reject) => e.file(resolve, reject)) });
        else if (e.isDirectory && depth < MAX_DEPTH && !e.name.startsWith(".")) await walk(e, `${prefix}${e.name}/`, depth + 1);
      }
    }
  };
  await walk(root, "", 1);
  return out;
}

/**
 * [{ path, file }] → Bert.load's bytes source and a name to show. One .gguf; or config.json, tokenizer.json (or
 * vocab.txt), model.safetensors (or else pytorch_model.bin, which the module reads as data), tokenizer_config.json
 * where given, and sentence-transformers' files as `sentence`.
 */
export async function sourceFromFiles(entries) {
  const byPath = new Map(entries.map((e) => [e.path, e.file]));
  const bytes = async (f) => new Uint8Array(await f.arrayBuffer());
  const gguf = entries.find((e) => e.path.endsWith(".gguf") && !e.path.includes("/"));
  if (gguf) return { source: { gguf: await bytes(gguf.file) }, name: gguf.path };
  const need = (n) => {
    const f = byPath.get(n);
    if (!f) {
      throw new Error(`the dropped files have no ${n}: drop the model's folder, or config.json, tokenizer.json (or `
        + "vocab.txt) and model.safetensors together, or one .gguf");
    }
    return f;
  };
  const tok = byPath.get("tokenizer.json");
  const source = {
    config: await bytes(need("config.json")),
    weights: await bytes(byPath.has("model.safetensors") || !byPath.has("pytorch_model.bin") ? need("model.safetensors")
      : byPath.get("pytorch_model.bin")),
    ...(tok ? { tokenizer: await bytes(tok) } : { vocab: await bytes(need("vocab.txt")) }),
  };
  if (byPath.has("tokenizer_config.json")) source.tokenizerConfig = await bytes(byPath.get("tokenizer_config.json"));
  const sentence = {};
  for (const { path, file } of entries) {
    const parts = path.split("/");
    const top = parts.length === 1 && SENTENCE_FILES.includes(path);
    // A module's folder (any name: modules.json says which ones count) holds its config and a Dense's weights.
    const module = parts.length === 2 && ["config.json", "model.safetensors", "pytorch_model.bin"].includes(parts[1])
      && byPath.has("modules.json");
    if (top || module) sentence[path] = await bytes(file);
  }
  if (Object.keys(sentence).length) source.sentence = sentence;
  return { source, name: "dropped model" };
}
