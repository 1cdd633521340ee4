// Tensor parallelism between workers: the one exchange the shards of a model need (src/backend/mod.rs, `Shard`).
// Twice per layer every shard has a partial sum of the same (rows, hidden) matrix, and each needs all of them.
// They meet in a SharedArrayBuffer (so the page must be cross-origin isolated): each shard copies its part into
// its slot, publishes a round number, and waits (Atomics.wait, in its worker) until every other shard has published
// the same round, then copies theirs out. Slots alternate between two sets by round: a shard can only write round
// r + 2 (the set of round r) after every shard has published round r + 1, i.e. after all have read round r.
// Parts longer than a slot go in several rounds.

/** Floats per shard and round. */
const SLOT = 1 << 16;
/**
 * How long a shard polls for the others before it sleeps (Atomics.wait): the shards do equal work, so the others
 * are usually close behind, and waking a sleeping worker costs tens of microseconds (up to ~100 µs seen for
 * Atomics.notify in a VM). Bounded, so that a shard far behind does not cost a core's time.
 */
const SPIN_MS = 0.1;
/** How long a shard waits for the others at one exchange before it gives up. */
const TIMEOUT_MS = 60_000;

/** Bytes of the header (per shard: its last round, its part's length in each of the two sets) and of the whole. */
const headerBytes = (count) => 4 * 3 * count;
const bufferBytes = (count) => headerBytes(count) + 4 * 2 * count * SLOT;

/** The buffer `count` shards exchange through (give the same one to every shard). */
export function shardBuffer(count) {
  return new SharedArrayBuffer(bufferBytes(count));
}

/**
 * `gather(mine, all)` for shard `rank` of `count` over `buffer`: fills the Float32Array `all` (count × mine.length)
 * with every shard's `mine`, in rank order. Blocks until the others arrive; throws if they do not within a minute
 * or sent parts of another length (workers out of step).
 */
export function shardGather(buffer, rank, count) {
  if (!(buffer instanceof SharedArrayBuffer) || buffer.byteLength !== bufferBytes(count)) {
    throw new TypeError(`shard buffer: expected a SharedArrayBuffer of ${bufferBytes(count)} bytes for ${count} shards`);
  }
  // header[q]: the last round shard q published; header[lengthAt(set, q)]: its part's length in that set.
  const header = new Int32Array(buffer, 0, 3 * count);
  const data = new Float32Array(buffer, headerBytes(count));
  const lengthAt = (set, q) => count + set * count + q;
  let round = 0;
  return (mine, all) => {
    const n = mine.length;
    if (all.length !== count * n) throw new Error(`shard gather: ${all.length} slots for ${count} parts of ${n}`);
    for (let off = 0; off < n; off += SLOT) {
      const len = Math.min(SLOT, n - off);
      const set = round & 1;
      data.set(mine.subarray(off, off + len), (set * count + rank) * SLOT);
      header[lengthAt(set, rank)] = len;
      round += 1;
      Atomics.store(header, rank, round);
      Atomics.notify(header, rank);
      all.set(mine.subarray(off, off + len), rank * n + off);
      for (let q = 0; q < count; q++) {
        if (q === rank) continue;
        const spinUntil = performance.now() + SPIN_MS;
        while (Atomics.load(header, q) < round && performance.now() < spinUntil);
        for (;;) {
          const seen = Atomics.load(header, q);
          if (seen >= round) break;
          if (Atomics.wait(header, q, seen, TIMEOUT_MS) === "timed-out") {
            throw new Error(`worker ${q} of this model did not reach the same step within ${TIMEOUT_MS / 1000} s `
              + "(it failed or was stopped); load the model again");
          }
        }
        if (header[lengthAt(set, q)] !== len) {
          throw new Error(`worker ${q} of this model is out of step (a part of ${header[lengthAt(set, q)]} values, `
            + `not ${len}); load the model again`);
        }
        all.set(data.subarray((set * count + q) * SLOT, (set * count + q) * SLOT + len), q * n + off);
      }
    }
  };
}
