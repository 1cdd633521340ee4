// One thread of a threaded build's pool (js/threads.js): instantiates the page's compiled module over its shared
// memory, then runs src/backend/cpu/threads.rs's worker loop until the pool ends. Both threaded builds' glue is
// imported statically (a bundler follows only literal imports; a page fetches only the .wasm it runs).
import * as glueThreads from "./wasm-threads/bertgpu.js";
import * as glueThreadsRelaxed from "./wasm-threads-relaxed/bertgpu.js";

self.addEventListener("message", ({ data }) => {
  if (data?.type !== "bertgpu-threads-start") return;
  const { initSync, __threadsRun, __threadsLost } = data.build === "threadsRelaxed" ? glueThreadsRelaxed : glueThreads;
  let exports;
  try {
    exports = initSync({ module: data.module, memory: data.memory });
  } catch (e) {
    self.postMessage({ type: "bertgpu-threads-error", message: `could not start the module: ${e?.message ?? e}` });
    return;
  }
  self.postMessage({ type: "bertgpu-threads-ready" });
  try {
    __threadsRun(data.generation); // returns when the pool ends
  } catch (e) {
    // A Rust panic aborts (a trap): the loop waiting for this thread's item must not wait forever.
    __threadsLost();
    self.postMessage({ type: "bertgpu-threads-error", message: `a thread of the pool stopped: ${e?.message ?? e}` });
    return;
  }
  // This thread's stack and thread-locals go back to the shared heap.
  exports.__wbindgen_thread_destroy?.();
  self.postMessage({ type: "bertgpu-threads-exit" });
  self.close();
});
