// The CPU backend's Q8_0 integer kernel (src/backend/cpu/q8.rs) in both wasm builds the package ships: wasm/
// (SIMD128: i32x4.dot_i16x8_s) and wasm-relaxed/ (relaxed SIMD, in both of its forms: fused,
// i32x4.relaxed_dot_i8x16_i7x16_add_s, and split, i16x8.relaxed_dot_i8x16_i7x16_s + widening). Natively,
// tests/q8_kernel.rs checks the definition; here each build's output must equal, bit for bit, a JavaScript
// transcription of that definition (x quantized to 7 bits per block of 32, exact integer sums, f32 scale steps),
// on shapes that exercise partial column groups and tile remainders. Then a whole Q8_0 model: `simd` picks the
// build, "auto" takes relaxed SIMD where the engine has it, and the two builds' embeddings are identical and close to
// PyTorch's. Whether the engine has relaxed SIMD is read from the engine itself (can it compile wasm-relaxed/?), and
// each test expects what the package must do in that case: an engine without it refuses the relaxed build, and the
// package then runs SIMD128 and rejects `simd: "relaxed"` with a clear error.
import test from "node:test";
import assert from "node:assert/strict";
import { convertGguf, withPage, readJson, cosine } from "./harness.mjs";

const ctx = withPage();

/**
 * all-MiniLM-L6-v2 as Q8_0 on the wasm CPU backend (7-bit activations) against PyTorch f32: tests/gguf.rs's floor
 * for Q8_0 (measured 0.9982–0.9994; the GPU, which keeps x in f32, 0.9997–0.9999).
 */
const MIN_COSINE_Q8_0 = 0.995;
test("both wasm builds' Q8_0 kernel equals the definition bit for bit", async () => {
  const got = await ctx.page.evaluate(async () => {
    // Whether this engine compiles the relaxed-SIMD build: asked of the engine, not of the package's probe.
    const relaxed = WebAssembly.validate(await (await fetch("/pkg/wasm-relaxed/bertgpu_bg.wasm")).arrayBuffer());
    const f = Math.fround;
    // xorshift, as tests/common's rand_vec (any reproducible stream would do).
    let s = 0x2545f491;
    const rand = () => {
      s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
      return s / 2 ** 32;
    };
    const f16 = (h) => { // IEEE half → number (normal and subnormal values only: the scales are finite)
      const e = (h >> 10) & 31, m = h & 1023, sign = h & 0x8000 ? -1 : 1;
      return sign * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
    };
    const quantizeRow = (x) => { // → { q: Int32Array, d: Float32Array } per block of 32, as q8.rs defines it
      const q = new Int32Array(x.length), d = new Float32Array(x.length / 32);
      for (let b = 0; b < x.length / 32; b++) {
        let amax = 0;
        for (let l = 0; l < 32; l++) amax = Math.max(amax, Math.abs(x[b * 32 + l]));
        const dd = f(amax / 63), id = dd > 0 ? f(1 / dd) : 0;
        d[b] = dd;
        for (let l = 0; l < 32; l++) {
          const t = f(x[b * 32 + l] * id), fl = Math.floor(t);
          q[b * 32 + l] = t - fl > 0.5 || (t - fl === 0.5 && fl % 2 !== 0) ? fl + 1 : fl; // half to even
        }
      }
      return { q, d };
    };
    const builds = {};
    let auto = null;
    let relaxedRefused = null;
    for (const [dir, form] of [["wasm", null], ["wasm-relaxed", "fused"], ["wasm-relaxed", "split"]]) {
      const glue = await import(`/pkg/${dir}/bertgpu.js?kernel-test`);
      if (form && !relaxed) {
        // An engine without relaxed SIMD must refuse the module (and the package must never load it there).
        relaxedRefused ??= await glue.default({ module_or_path: `/pkg/${dir}/bertgpu_bg.wasm` })
          .then(() => "loaded", (e) => e.name);
        continue;
      }
      await glue.default({ module_or_path: `/pkg/${dir}/bertgpu_bg.wasm` });
      if (form) {
        auto ??= glue.__q8DotForm("auto"); // the form this engine and CPU run by default
        if (glue.__q8DotForm(form) !== form) throw new Error(`could not force the ${form} form`);
      }
      const cases = [];
      // The last shape's x sits on half steps (each block's largest value 63, so d = 1): every rounding is a tie.
      for (const [m, n, k, ties] of [[1, 1, 32], [3, 5, 64], [4, 4, 32], [7, 9, 96], [65, 13, 128], [12, 384, 384],
        [5, 6, 64, true]]) {
        const blocks = k / 32;
        const x = Float32Array.from({ length: m * k }, (_, i) => (!ties ? (rand() * 2 - 1) * 4
          : i % 32 === 0 ? 63 : Math.floor(rand() * 63) - 31.5));
        const w = new Uint8Array(n * blocks * 34);
        const dv = new DataView(w.buffer);
        for (let r = 0; r < n * blocks; r++) {
          dv.setUint16(r * 34, 0x2000 + Math.floor(rand() * 0x800), true); // scales 2^-7 … 2^-5
          for (let l = 0; l < 32; l++) dv.setInt8(r * 34 + 2 + l, Math.floor(rand() * 255) - 127);
        }
        const y = glue.__debugLinearQ8(x, w, m, n, k);
        let mismatches = 0, first = null;
        for (let i = 0; i < m; i++) {
          const { q, d } = quantizeRow(x.subarray(i * k, (i + 1) * k));
          for (let j = 0; j < n; j++) {
            let acc = 0;
            for (let b = 0; b < blocks; b++) {
              const o = (j * blocks + b) * 34;
              let isum = 0;
              for (let l = 0; l < 32; l++) isum += dv.getInt8(o + 2 + l) * q[b * 32 + l];
              acc = f(acc + f(isum * f(f16(dv.getUint16(o, true)) * d[b])));
            }
            if (!Object.is(acc, y[i * n + j])) {
              mismatches += 1;
              first ??= `out[${i}, ${j}] = ${y[i * n + j]} vs ${acc}`;
            }
          }
        }
        cases.push({ shape: `${m}x${n}x${k}${ties ? " (ties)" : ""}`, outputs: y.length, mismatches, first });
      }
      builds[form ? `${dir} (${form})` : dir] = cases;
      if (form) glue.__q8DotForm("auto");
    }
    return { relaxed, builds, auto, relaxedRefused };
  });
  if (got.relaxed) {
    assert.deepEqual(Object.keys(got.builds), ["wasm", "wasm-relaxed (fused)", "wasm-relaxed (split)"]);
    assert.ok(["fused", "split"].includes(got.auto), `the engine's form: ${got.auto}`);
    console.log(`relaxed SIMD's dot product here: ${got.auto} (from how the engine lowers the fused instruction)`);
  } else {
    assert.deepEqual(Object.keys(got.builds), ["wasm"]);
    assert.equal(got.relaxedRefused, "CompileError", "an engine without relaxed SIMD compiled the relaxed build");
    console.log("this engine has no relaxed SIMD: the SIMD128 build's kernel only");
  }
  for (const cases of Object.values(got.builds)) assert.equal(cases.length, 7);
  for (const [dir, cases] of Object.entries(got.builds)) {
    for (const c of cases) {
      assert.equal(c.mismatches, 0, `${dir} ${c.shape}: ${c.mismatches} outputs differ, first ${c.first}`);
    }
  }
  ctx.page.checkErrors();
});

test("a Q8_0 model: `simd` picks the build, both builds give the same embeddings, within Q8_0's floor of PyTorch", async () => {
  const gguf = convertGguf("all-MiniLM-L6-v2", "q8_0", "minilm-q8_0.gguf");
  const g = readJson("tests/golden/model.json")["all-MiniLM-L6-v2"];
  const got = await ctx.page.evaluate(async ({ url, sentences }) => {
    const out = {};
    for (const simd of ["auto", "simd128", "relaxed"]) {
      try {
        const bert = await bertgpu.Bert.load(url, { device: "cpu", simd });
        out[simd] = { build: bert.simd, vectors: (await bert.embed(sentences, { normalize: false })).map((v) => Array.from(v)) };
        bert.dispose();
      } catch (e) {
        out[simd] = { error: `${e.name}: ${e.message}` };
      }
    }
    let error = null;
    try {
      await bertgpu.Bert.load(url, { device: "cpu", simd: "avx" });
    } catch (e) {
      error = `${e.name}: ${e.message}`;
    }
    const engine = WebAssembly.validate(await (await fetch("/pkg/wasm-relaxed/bertgpu_bg.wasm")).arrayBuffer());
    return { out, error, engine, probe: bertgpu.hasRelaxedSimd() };
  }, { url: ctx.env.models.url + gguf, sentences: g.sentences });
  assert.equal(got.probe, got.engine, "hasRelaxedSimd() says what the engine can compile");
  assert.equal(got.out.simd128.build, "simd128", got.out.simd128.error);
  assert.equal(got.out.simd128.vectors.length, g.sentences.length);
  if (got.engine) {
    assert.equal(got.out.auto.build, "relaxed", "auto takes relaxed SIMD where the engine has it");
    assert.equal(got.out.relaxed.build, "relaxed", got.out.relaxed.error);
    // Bit for bit: only the kernel differs between the builds, and it computes the same integers and floats.
    assert.deepEqual(got.out.simd128.vectors, got.out.relaxed.vectors, "the two builds differ");
  } else {
    assert.equal(got.out.auto.build, "simd128", "auto takes SIMD128 where the engine has no relaxed SIMD");
    assert.deepEqual(got.out.auto.vectors, got.out.simd128.vectors);
    assert.equal(got.out.relaxed.error, "Error: Bert.load: simd: \"relaxed\" was asked for, but this engine does not "
      + "implement WebAssembly relaxed SIMD; use \"auto\" or \"simd128\"");
  }
  const cosines = g.sentences.map((s, i) => {
    const c = cosine(got.out.auto.vectors[i], g.mean[i]);
    assert.ok(c >= MIN_COSINE_Q8_0, `"${s}": cosine ${c} to PyTorch < ${MIN_COSINE_Q8_0}`);
    return c.toFixed(5);
  });
  console.log(`MiniLM Q8_0 on the wasm CPU backend, cosines to PyTorch: ${cosines.join(", ")}`);
  assert.match(got.error, /^TypeError: Bert\.load: simd must be one of "auto", "relaxed", "simd128" \(got "avx"\)$/);
  ctx.page.checkErrors();
});
