// fineTune's checkpoints in the browser. Where the Origin Private File System can write files (createWritable): one
// folder per run name under "bertgpu-checkpoints", one sub-folder per checkpoint (`checkpoint-<step>`) holding the
// files that the Rust side writes (src/training/checkpoint.rs: the state, the trainer's position, and the manifest of
// their SHA-256 written last); a checkpoint is listed only once its manifest exists, so one cut short by a closed tab
// is never seen. Elsewhere IndexedDB: database "bertgpu-checkpoints", each checkpoint's files and its record written
// in one transaction, so it is there whole or not at all. Either way, one damaged later is refused by its manifest
// on resume.

const ROOT = "bertgpu-checkpoints";
const PREFIX = "checkpoint-";

function opfs() {
  return navigator.storage.getDirectory();
}

/** "opfs", "indexeddb", or an error naming what is missing. */
function backend() {
  const hasOpfs = typeof navigator !== "undefined" && typeof navigator.storage?.getDirectory === "function"
    && typeof globalThis.FileSystemFileHandle?.prototype?.createWritable === "function";
  if (hasOpfs) return "opfs";
  if (typeof indexedDB !== "undefined") return "indexeddb";
  throw new Error("checkpoints need the Origin Private File System (navigator.storage.getDirectory) or IndexedDB, "
    + "which this environment lacks: use a current browser, or fine-tune without `checkpoint`");
}

// ---- IndexedDB: store "files" keyed [run, checkpoint, file], store "checkpoints" keyed [run, checkpoint].

let dbPromise = null;
function db() {
  dbPromise ??= new Promise((resolve, reject) => {
    const req = indexedDB.open(ROOT, 1);
    req.onupgradeneeded = () => {
      req.result.createObjectStore("files");
      req.result.createObjectStore("checkpoints");
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  return dbPromise;
}

/** Runs `fn(stores)` in one transaction over both stores; resolves when it has committed. */
async function tx(mode, fn) {
  const d = await db();
  return new Promise((resolve, reject) => {
    const t = d.transaction(["files", "checkpoints"], mode);
    let out;
    t.oncomplete = () => resolve(out);
    t.onerror = () => reject(t.error);
    t.onabort = () => reject(t.error ?? new Error("the IndexedDB transaction was aborted"));
    out = fn({ files: t.objectStore("files"), checkpoints: t.objectStore("checkpoints") });
  });
}

const request = (r) => new Promise((resolve, reject) => {
  r.onsuccess = () => resolve(r.result);
  r.onerror = () => reject(r.error);
});

/** The key range of everything under `prefix` (an array key's leading parts). */
const under = (...prefix) => IDBKeyRange.bound(prefix, [...prefix, []]);

function idbStore(name) {
  return {
    async list() {
      const keys = await tx("readonly", (s) => request(s.checkpoints.getAllKeys(under(name))));
      return (await keys).map((k) => k[1]);
    },
    async read(checkpoint, file) {
      const v = await tx("readonly", (s) => request(s.files.get([name, checkpoint, file])));
      const bytes = await v;
      if (bytes == null) throw new Error(`checkpoint "${name}/${checkpoint}" has no ${file}`);
      return bytes;
    },
    async write(checkpoint, files) {
      try {
        await tx("readwrite", (s) => {
          s.files.delete(under(name, checkpoint));
          let size = 0;
          for (const [file, bytes] of files) {
            s.files.put(bytes, [name, checkpoint, file]);
            size += bytes.length;
          }
          s.checkpoints.put({ size, date: Date.now() }, [name, checkpoint]);
        });
      } catch (e) {
        throw quotaSaid(e, name, checkpoint);
      }
    },
    async remove(checkpoint) {
      await tx("readwrite", (s) => {
        s.files.delete(under(name, checkpoint));
        s.checkpoints.delete([name, checkpoint]);
      });
    },
  };
}

function checkName(name) {
  if (typeof name !== "string" || !/^[\w.-]{1,100}$/.test(name) || name.startsWith(".")) {
    throw new TypeError(`checkpoint name must be 1-100 letters, digits, '_', '-' or '.', not starting with '.' `
      + `(got ${JSON.stringify(name)})`);
  }
}

async function runsFolder(create) {
  return (await opfs()).getDirectoryHandle(ROOT, { create });
}

async function exists(dir, file) {
  try {
    await dir.getFileHandle(file);
    return true;
  } catch {
    return false;
  }
}

/** The run's checkpoints that are complete (their manifest written): [{ name, handle }]. */
async function complete(run) {
  const out = [];
  for await (const [name, handle] of run.entries()) {
    if (handle.kind === "directory" && name.startsWith(PREFIX) && await exists(handle, "manifest.json")) {
      out.push({ name, handle });
    }
  }
  return out;
}

/** A quota error as what to do about it (nothing of the checkpoint was kept); any other error as it is. */
function quotaSaid(e, name, checkpoint) {
  if (e?.name !== "QuotaExceededError") return e;
  return new Error(`the checkpoint "${name}/${checkpoint}" does not fit in this origin's storage quota `
    + "(nothing of it was kept): free space with Bert.deleteCheckpoint, or checkpoint less often");
}

/** The store the Rust side saves to and resumes from (see `JsStore` in src/wasm/train.rs). */
export async function openCheckpointStore(name) {
  checkName(name);
  if (backend() === "indexeddb") {
    navigator.storage?.persist?.().catch(() => {});
    return idbStore(name);
  }
  const run = await (await runsFolder(true)).getDirectoryHandle(name, { create: true });
  // Ask that the origin's storage not be evicted under pressure; the answer does not change what we do.
  navigator.storage.persist?.().catch(() => {});
  return {
    async list() {
      return (await complete(run)).map((c) => c.name);
    },
    async read(checkpoint, file) {
      const dir = await run.getDirectoryHandle(checkpoint);
      return new Uint8Array(await (await (await dir.getFileHandle(file)).getFile()).arrayBuffer());
    },
    async write(checkpoint, files) {
      // A half-written one of the same name (a tab closed mid-write) is removed first; the manifest comes last.
      await run.removeEntry(checkpoint, { recursive: true }).catch(() => {});
      const dir = await run.getDirectoryHandle(checkpoint, { create: true });
      try {
        for (const [file, bytes] of files) {
          const w = await (await dir.getFileHandle(file, { create: true })).createWritable();
          try {
            await w.write(bytes);
            await w.close();
          } catch (e) {
            await w.abort().catch(() => {});
            throw e;
          }
        }
      } catch (e) {
        await run.removeEntry(checkpoint, { recursive: true }).catch(() => {});
        throw quotaSaid(e, name, checkpoint);
      }
    },
    async remove(checkpoint) {
      await run.removeEntry(checkpoint, { recursive: true });
    },
  };
}

/**
 * Every run's checkpoints: [{ name, step, totalSteps, size, date }], the newest complete checkpoint of each run (its
 * step of the run's total, its size in bytes, when it was written).
 */
export async function listCheckpoints() {
  if (backend() === "indexeddb") return listIdb();
  let runs;
  try {
    runs = await runsFolder(false);
  } catch (e) {
    if (e?.name === "NotFoundError") return [];
    throw e;
  }
  const out = [];
  for await (const [name, run] of runs.entries()) {
    if (run.kind !== "directory") continue;
    // A run still training writes a newer checkpoint and removes the oldest meanwhile: one read between the two
    // finds a file gone (NotFoundError), and the newest is looked for again; a run removed meanwhile is left out.
    for (let attempt = 1; attempt <= 3; attempt++) {
      try {
        const summary = await newestOf(run);
        if (summary) out.push({ name, ...summary });
        break;
      } catch (e) {
        if (e?.name !== "NotFoundError") throw e;
      }
    }
  }
  return out.sort((a, b) => b.date - a.date);
}

/** A run's newest complete checkpoint: { step, totalSteps, size, date }, or null if it has none. */
async function newestOf(run) {
  let best = null;
  for (const c of await complete(run)) {
    const step = Number(c.name.slice(PREFIX.length));
    if (!best || step > best.step) best = { step, handle: c.handle };
  }
  if (!best) return null;
  let size = 0;
  let date = 0;
  let totalSteps = null;
  for await (const [fname, f] of best.handle.entries()) {
    if (f.kind !== "file") continue;
    const file = await f.getFile();
    size += file.size;
    date = Math.max(date, file.lastModified);
    if (fname === "trainer_state.json") {
      try {
        totalSteps = JSON.parse(await file.text()).loop.report.steps.at(-1)?.total_steps ?? null;
      } catch {
        // a damaged one: listed all the same; resume will say what is wrong with it
      }
    }
  }
  return { step: best.step, totalSteps, size, date: new Date(date) };
}

/** Removes a run's checkpoints; false if it had none. */
export async function deleteCheckpoint(name) {
  checkName(name);
  if (backend() === "indexeddb") {
    const had = (await idbStore(name).list()).length > 0;
    await tx("readwrite", (s) => {
      s.files.delete(under(name));
      s.checkpoints.delete(under(name));
    });
    return had;
  }
  try {
    await (await runsFolder(false)).removeEntry(name, { recursive: true });
    return true;
  } catch (e) {
    if (e?.name === "NotFoundError") return false;
    throw e;
  }
}

/** listCheckpoints over IndexedDB. */
async function listIdb() {
  const [keys, values] = await tx("readonly", (s) => Promise.all([
    request(s.checkpoints.getAllKeys()), request(s.checkpoints.getAll())]));
  const newest = new Map();
  (await keys).forEach(([run, checkpoint], i) => {
    const step = Number(checkpoint.slice(PREFIX.length));
    if (!newest.has(run) || step > newest.get(run).step) newest.set(run, { step, checkpoint, ...values[i] });
  });
  const out = [];
  for (const [name, c] of newest) {
    let totalSteps = null;
    try {
      const state = await idbStore(name).read(c.checkpoint, "trainer_state.json");
      totalSteps = JSON.parse(new TextDecoder().decode(state)).loop.report.steps.at(-1)?.total_steps ?? null;
    } catch {
      // listed all the same; resume will say what is wrong with it
    }
    out.push({ name, step: c.step, totalSteps, size: c.size, date: new Date(c.date) });
  }
  return out.sort((a, b) => b.date - a.date);
}
