// What one exchange between two workers costs: the synchronisation a forward split across the worker entry's two
// workers (tensor parallelism: half the heads and half of every weight matrix each) would pay about twice per layer.
// Two workers swap `n` floats (13 tokens × 384 = 4992 by default) through a SharedArrayBuffer, `rounds` times, with
// Atomics.wait (or spinning); prints microseconds per exchange. Needs a cross-origin isolated page, which the server
// gives here. From the repository root:
//
//   node bench/sync.mjs [n 4992] [rounds 2000] [--spin]
import { withBenchPage } from "./harness.mjs";

const args = process.argv.slice(2);
const spin = args.includes("--spin");
const [n = "4992", rounds = "2000"] = args.filter((a) => !a.startsWith("--"));
await withBenchPage({ isolated: true }, async (page) => {
  const r = await page.evaluate(async ({ n, rounds, spin }) => {
    if (!crossOriginIsolated) throw new Error("the page is not cross-origin isolated");
    const sab = new SharedArrayBuffer(8 + 8 * n);
    const workers = [0, 1].map(() => new Worker("/bench/sync-worker.js"));
    const done = workers.map((w) => new Promise((resolve) => { w.onmessage = (e) => resolve(e.data); }));
    workers.forEach((w, me) => w.postMessage({ sab, me, n, rounds, spin }));
    const out = await Promise.all(done);
    workers.forEach((w) => w.terminate());
    return out.map((o) => o.us);
  }, { n: Number(n), rounds: Number(rounds), spin });
  console.log(`${n} floats each way, ${rounds} exchanges${spin ? " (spinning)" : ""}: `
    + `${r.map((us) => us.toFixed(1)).join(" / ")} µs per exchange (worker 0 / 1)`);
});
