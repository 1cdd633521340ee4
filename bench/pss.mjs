// The proportional set size (Pss, /proc/PID/smaps_rollup) of a headless Chromium's processes, by kind of process:
// what bench/memory.mjs samples, and bench/gpu_process.mjs and bench/cache_write.mjs with it.
import fs from "node:fs";
import path from "node:path";

/** The ids of every process below `root` (not `root` itself), from /proc/PID/stat's parent ids. */
function descendants(root) {
  const parent = new Map();
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      // pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ")".
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parent.set(Number(d), ppid);
    } catch {
      // gone meanwhile
    }
  }
  const out = [];
  for (const pid of parent.keys()) {
    for (let p = parent.get(pid), seen = 0; p && seen < 64; p = parent.get(p), seen++) {
      if (p === root) {
        out.push(pid);
        break;
      }
    }
  }
  return out;
}

/** Chromium's kind of process, from its command line: browser, renderer, gpu-process, zygote, utility:<service>. */
const kinds = new Map();
function kindOf(pid) {
  if (kinds.has(pid)) return kinds.get(pid);
  let kind = "other";
  try {
    // Chromium rewrites its children's titles: their arguments are joined by spaces, not NULs.
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split(/[\0 ]/);
    const type = cmd.find((a) => a.startsWith("--type="))?.slice(7);
    if (!cmd[0].includes("chrom")) kind = path.basename(cmd[0]) || "other";
    else if (!type) kind = "browser";
    else if (type === "utility") {
      const sub = cmd.find((a) => a.startsWith("--utility-sub-type="))?.slice(19) ?? "";
      kind = `utility:${sub.split(".")[0] || "?"}`;
    } else kind = type;
  } catch {
    // gone
  }
  kinds.set(pid, kind);
  return kind;
}

/**
 * Chromium's own services that no page asks for, started by its own timers: listed by kind but left out of the
 * totals. `utility:on_device_model` (its on-device model service) started a few minutes into a run of 2000 calls on
 * WebGPU (2026-11-27) and added 56.5 MiB to the total, while the processes the page uses (browser, renderer,
 * gpu-process, network, storage, zygote) moved by +0.2 MiB together: it was the whole of the "growth" measured there.
 */
const NOT_THE_PAGE = new Set(["utility:on_device_model"]);

/**
 * Pss of every Chromium process now (KiB → bytes), by kind, and their total (without `NOT_THE_PAGE`); `anon`: the
 * total without file-backed pages (Pss_Anon + Pss_Shmem), which another Chromium starting or stopping on the machine
 * does not move (the pages of the chromium binary and its libraries are shared with it, so their share of Pss
 * changes).
 */
export function sample() {
  const byKind = {};
  let total = 0, anon = 0;
  for (const pid of descendants(process.pid)) {
    let pss, pssAnon;
    try {
      const text = fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
      const kb = (field) => Number(text.match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"))?.[1] ?? NaN) * 1024;
      pss = kb("Pss");
      if (Number.isNaN(pss)) continue;
      pssAnon = kb("Pss_Anon") + kb("Pss_Shmem");
    } catch {
      continue; // exited between the listing and the read
    }
    const k = kindOf(pid);
    byKind[k] = (byKind[k] ?? 0) + pss;
    if (NOT_THE_PAGE.has(k)) continue;
    anon += pssAnon;
    total += pss;
  }
  return { t: Date.now(), total, anon, byKind };
}

/** Forgets the kinds of the processes seen so far (a new browser may reuse their ids). */
export function forgetKinds() {
  kinds.clear();
}
