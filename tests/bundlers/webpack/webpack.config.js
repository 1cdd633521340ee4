// The whole configuration: webpack 5 follows the package's import() and new URL(..., import.meta.url) by itself.
import path from "node:path";

export default {
  mode: "production",
  entry: "./main.js",
  output: { path: path.resolve(import.meta.dirname, "dist"), clean: true },
};
