// The demo page's pure helpers (www/examples.js: the training examples' formats, the example corpus; www/zeroshot.js's
// labels) on real inputs, and its service worker's list of files to keep offline against the files there are. No
// browser, no package build: run with node --test tests/node/
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { relativePath, sourceFromFiles } from "../../www/dropped.js";
import { corpusOf, examplesToText, parseExamples } from "../../www/examples.js";
import { labelsOf } from "../../www/zeroshot.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const FORTUNES = fs.readFileSync(path.join(ROOT, "tests/data/fortunes/train.jsonl"), "utf8");

test("the example data (JSON lines) reads as its examples, and back through the page's label: text form", () => {
  const lines = FORTUNES.split("\n").filter((l) => l.trim());
  const ex = parseExamples(FORTUNES);
  assert.equal(ex.length, lines.length);
  assert.ok(ex.length > 50, `only ${ex.length} examples`);
  for (const [i, line] of lines.entries()) {
    const o = JSON.parse(line);
    assert.deepEqual(ex[i], { text: o.text, label: o.label }, `line ${i + 1}`);
  }
  assert.ok(new Set(ex.map((e) => e.label)).size >= 3, "several labels");
  // What the text box shows reads back as the same examples (whitespace runs become one space).
  const back = parseExamples(examplesToText(ex));
  assert.equal(back.length, ex.length);
  back.forEach((e, i) => assert.deepEqual(e, { label: ex[i].label, text: ex[i].text.replace(/\s+/g, " ").trim() }));
});

test("CSV and TSV with a header, RFC 4180 quoting; label: text lines; numbers as labels", () => {
  const csv = "id,Text,label\n1,\"Hello, \"\"world\"\"\",greeting\r\n2,\"two\nlines\", farewell \n\n";
  assert.deepEqual(parseExamples(csv, "data.csv"), [
    { text: "Hello, \"world\"", label: "greeting" },
    { text: "two\nlines", label: "farewell" },
  ]);
  assert.deepEqual(parseExamples("label\ttext\npos\tgreat, really\n", "x.tsv"), [{ text: "great, really", label: "pos" }]);
  assert.deepEqual(parseExamples("pos: a fine film\n\nneg : dull: and long\n"), [
    { label: "pos", text: "a fine film" },
    { label: "neg", text: "dull: and long" },
  ]);
  assert.deepEqual(parseExamples("{\"text\": \"a\", \"label\": 3}"), [{ text: "a", label: "3" }]);
  assert.deepEqual(parseExamples("  \n "), []);
});

test("what the page cannot read is named by its line or row", () => {
  assert.throws(() => parseExamples("{\"text\": \"a\", \"label\": \"x\"}\n{oops"), /^Error: line 2 is not JSON$/);
  assert.throws(() => parseExamples("{\"text\": \"a\"}"), /line 1 needs "text" and "label"/);
  assert.throws(() => parseExamples("sentence,class\na,b\n", "d.csv"), /must name the columns "text" and "label" \(got sentence, class\)/);
  assert.throws(() => parseExamples("text,label\na,b\nonly\n", "d.csv"), /row 3 has fewer columns than the header/);
  assert.throws(() => parseExamples("pos: fine\nno colon here"), /line 2 should read "label: text"/);
});

test("the pre-training example corpus: one document per quotation, one sentence a line", () => {
  const docs = corpusOf(FORTUNES).split("\n\n");
  const lines = FORTUNES.split("\n").filter((l) => l.trim());
  assert.equal(docs.length, lines.length);
  const first = JSON.parse(lines[0]).text;
  assert.equal(docs[0], first.split(/(?<=[.!?])\s+/).join("\n"));
  assert.ok(docs[0].split("\n").length >= 2, "the first quotation has two sentences");
  assert.ok(!docs.some((d) => d.trim() === ""), "no empty document");
});

test("the service worker keeps every file of the page and of the package offline", () => {
  const sw = fs.readFileSync(path.join(ROOT, "www/sw.js"), "utf8");
  const shell = sw.slice(sw.indexOf("const SHELL = ["), sw.indexOf("];", sw.indexOf("const SHELL = [")));
  const listed = new Set([...shell.matchAll(/"(\/[^"]*)"/g)].map((m) => m[1]));
  assert.ok(listed.size > 20, `only ${listed.size} files in SHELL: is the parser right?`);
  const page = fs.readdirSync(path.join(ROOT, "www")).filter((f) => /\.(js|css)$/.test(f) && f !== "sw.js");
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "js/package.json"), "utf8")).files
    .filter((f) => f.endsWith(".js"));
  const want = [...page.map((f) => `/www/${f}`), ...pkg.map((f) => `/pkg/${f}`)];
  assert.ok(want.length > 25, `only ${want.length} files to look for`);
  const missing = want.filter((f) => !listed.has(f));
  assert.deepEqual(missing, [], "www/sw.js's SHELL lacks these");
  // Every JS file the package ships is in its "files".
  const shipped = fs.readdirSync(path.join(ROOT, "js")).filter((f) => f.endsWith(".js"));
  assert.deepEqual(shipped.filter((f) => !pkg.includes(f)), [], "js/package.json's files lacks these");
});

test("a dropped or picked folder brings sentence-transformers' module files; loose files the top-level ones", async () => {
  // The Dense stack as a folder picker gives it: webkitRelativePath under the folder's name.
  const stack = path.join(ROOT, "tests/models/st-stacks/mean-dense-normalize");
  const minilm = path.join(ROOT, "models/all-MiniLM-L6-v2");
  const file = (abs, rel) => Object.assign(new Blob([fs.readFileSync(abs)]), { name: path.basename(rel),
    webkitRelativePath: `my-model/${rel}` });
  const picked = ["config.json", "tokenizer.json", "tokenizer_config.json"].map((f) => file(path.join(minilm, f), f));
  // A stand-in for the weights (the mapping reads bytes, it does not parse them).
  picked.push(Object.assign(new Blob([new Uint8Array([1, 2, 3])]), { name: "model.safetensors",
    webkitRelativePath: "my-model/model.safetensors" }));
  for (const rel of ["modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "2_Dense/config.json",
    "2_Dense/model.safetensors"]) picked.push(file(path.join(stack, rel), rel));
  const { source, name } = await sourceFromFiles(picked.map((f) => ({ path: relativePath(f), file: f })));
  assert.equal(name, "dropped model");
  assert.deepEqual(Object.keys(source).sort(), ["config", "sentence", "tokenizer", "tokenizerConfig", "weights"]);
  assert.deepEqual(Object.keys(source.sentence).sort(), ["1_Pooling/config.json", "2_Dense/config.json",
    "2_Dense/model.safetensors", "modules.json", "sentence_bert_config.json"]);
  assert.deepEqual(Buffer.from(source.sentence["2_Dense/model.safetensors"]),
    fs.readFileSync(path.join(stack, "2_Dense/model.safetensors")));
  assert.deepEqual(Array.from(source.weights), [1, 2, 3], "the root's model.safetensors, not the Dense module's");
  // Loose files: no folders, so only the top-level sentence-transformers files; no modules.json, no module files.
  const loose = picked.filter((f) => !f.webkitRelativePath.slice("my-model/".length).includes("/"))
    .map((f) => ({ path: f.name, file: f }));
  const flat = await sourceFromFiles(loose);
  assert.deepEqual(Object.keys(flat.source.sentence).sort(), ["modules.json", "sentence_bert_config.json"]);
  const bare = await sourceFromFiles(loose.filter((e) => !["modules.json", "sentence_bert_config.json"].includes(e.path)));
  assert.equal(bare.source.sentence, undefined);
  await assert.rejects(sourceFromFiles(loose.filter((e) => e.path !== "config.json")), /the dropped files have no config\.json/);
  const gguf = await sourceFromFiles([{ path: "m.gguf", file: new Blob([new Uint8Array([7])]) }]);
  assert.deepEqual([gguf.name, Array.from(gguf.source.gguf)], ["m.gguf", [7]]);
  // Weights in pytorch_model.bin (the module reads its pickle as data): used where there is no model.safetensors.
  const bin = { path: "pytorch_model.bin", file: new Blob([new Uint8Array([9])]) };
  const binOnly = await sourceFromFiles([...loose.filter((e) => e.path !== "model.safetensors"), bin]);
  assert.deepEqual(Array.from(binOnly.source.weights), [9]);
  assert.deepEqual(Array.from((await sourceFromFiles([...loose, bin])).source.weights), [1, 2, 3], "safetensors first");
});

test("the zero-shot panel's labels: comma-separated and trimmed, empty pieces dropped", () => {
  assert.deepEqual(labelsOf(" sports, politics ,cooking"), ["sports", "politics", "cooking"]);
  assert.deepEqual(labelsOf("a,, b,"), ["a", "b"]);
  assert.deepEqual(labelsOf(" , "), []);
});
