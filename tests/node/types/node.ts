// A Node.js project's view of the types: Node's own (@types/node), without TypeScript's DOM library.
import { Bert, type LoadOptions } from "bertgpu";
import fs from "node:fs/promises";
import { pathToFileURL } from "node:url";

const options: LoadOptions = { device: "cpu", cacheDir: "./.cache/bertgpu", wasm: await fs.readFile("bertgpu_bg.wasm") };
const fromPath = await Bert.load("./models/all-MiniLM-L6-v2", options);
const fromUrl = await Bert.load(pathToFileURL("/models/all-MiniLM-L6-v2.gguf"));
const fromBytes = await Bert.load({
  config: await fs.readFile("config.json"), tokenizer: await fs.readFile("tokenizer.json"),
  weights: await fs.readFile("model.safetensors"),
});
const vectors: Float32Array[] = await fromPath.embed(["one", "two"]);
console.log(vectors, fromUrl.device, fromBytes.simd);
