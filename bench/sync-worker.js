// One side of bench/sync.mjs: exchanges `n` floats with the other worker through a SharedArrayBuffer `rounds` times
// (write mine, raise my flag, wait for the other's, read the other's values, and wait until it has read mine), as
// one all-reduce of a forward split across two workers would.
self.onmessage = (e) => {
  const { sab, me, n, rounds, spin } = e.data;
  const flags = new Int32Array(sab, 0, 2);
  const data = [new Float32Array(sab, 8, n), new Float32Array(sab, 8 + 4 * n, n)];
  const mine = new Float32Array(n).fill(me + 1);
  const other = 1 - me;
  const waitFor = (target) => {
    for (;;) {
      const v = Atomics.load(flags, other);
      if (v >= target) return;
      if (!spin) Atomics.wait(flags, other, v);
    }
  };
  let sum = 0;
  const t0 = performance.now();
  for (let r = 1; r <= rounds; r++) {
    data[me].set(mine);
    Atomics.store(flags, me, 2 * r - 1);
    Atomics.notify(flags, me);
    waitFor(2 * r - 1);
    const theirs = data[other];
    for (let i = 0; i < n; i++) sum += theirs[i];
    Atomics.store(flags, me, 2 * r);
    Atomics.notify(flags, me);
    waitFor(2 * r);
  }
  self.postMessage({ me, us: (performance.now() - t0) * 1000 / rounds, sum });
};
