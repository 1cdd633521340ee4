// The packed-weight kernels (shaders/matmul_packed.wgsl `matmul_packed` / `matmul_scalar`, shaders/embeddings.wgsl)
// in the browser's own WGSL compiler, on a device without `shader-f16` (the package never asks for it: f16 weights
// are decoded with unpack2x16float, so this is the device it runs on whatever the adapter offers; SwiftShader here
// offers none): every dtype variant must build, and Q8_0 / Q4_0 `matmul_packed` must match a JavaScript reference on
// shapes whose rows hold an odd number of blocks (so half the blocks start mid-word, differently per column). Native
// lavapipe runs the same kernels against the CPU twin in tests/quant_kernels.rs; this file checks what only a
// browser can: Tint accepts them and decodes without f16 support. Needs no pkg/: it composes the kernels from the
// .wgsl files of the repository (wgsl.mjs).
import test, { before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { ARGS, CHROMIUM, ROOT } from "./harness.mjs";
import { serve } from "./server.mjs";
import { composeWgsl } from "./wgsl.mjs";

let site, context, profile, page;

before(async () => {
  site = await serve(ROOT);
  profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-chromium-"));
  context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  page = await context.newPage();
  // Any document of the served origin will do (127.0.0.1 is a secure context, so navigator.gpu exists): the
  // server's plain-text "not found" page, which loads nothing else.
  await page.goto(`${site.url}quant-kernels-blank`);
});

after(async () => {
  await context?.close();
  await site?.close();
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
});

test("every packed-weight kernel variant compiles on a device without shader-f16", async () => {
  const variants = {
    "matmul.wgsl": [["matmul_vec4", {}]],
    "matmul_packed.wgsl": [
      ["matmul_packed", { WDT: 1 }], ["matmul_packed", { WDT: 2, ACT: 1, HAS_BIAS: 1 }], ["matmul_packed", { WDT: 3, ACT: 4 }],
      ["matmul_scalar", { WDT: 0 }], ["matmul_scalar", { WDT: 1, ACT: 2 }],
    ],
    "embeddings.wgsl": [["embeddings", {}], ["embeddings", { WORD_DT: 2, POS_DT: 1, TYPE_DT: 3 }], ["embeddings", { WORD_DT: 3, POS_DT: 2, TYPE_DT: 1 }]],
  };
  const composed = Object.fromEntries(Object.keys(variants).map((file) => [file, composeWgsl(file)]));
  const kernels = Object.entries(variants).map(([file, entries]) => [file, composed[file].text, entries]);
  const got = await page.evaluate(async (kernels) => {
    const out = [];
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return { errors: ["no WebGPU adapter"] };
    // Requested as the package requests it (src/backend/gpu/context.rs: timestamp queries at most, never shader-f16),
    // whether or not the adapter offers f16.
    const device = await adapter.requestDevice();
    for (const [file, code, entries] of kernels) {
      const module = device.createShaderModule({ code });
      for (const m of (await module.getCompilationInfo()).messages) {
        if (m.type === "error") out.push({ file, line: m.lineNum, pos: m.linePos, message: m.message });
      }
      for (const [entryPoint, constants] of entries) {
        try {
          await device.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint, constants } });
        } catch (e) {
          out.push(`${file}:${entryPoint} ${JSON.stringify(constants)}: ${e.message}`);
        }
      }
    }
    return { adapterF16: adapter.features.has("shader-f16"), deviceF16: device.features.has("shader-f16"), errors: out };
  }, kernels);
  // Compiler messages cite lines of the composed text: name the file and line under shaders/ instead.
  const errors = got.errors.map((e) => typeof e === "string" ? e : `${composed[e.file].locate(e.line)}:${e.pos}: ${e.message}`);
  assert.deepEqual(errors, [], errors.join("\n"));
  console.log(`# adapter offers shader-f16: ${got.adapterF16}; the kernels compiled on a device without it`);
  assert.equal(got.deviceF16, false, "a device requested without shader-f16 has it (the point of this test)");
});

test("Q8_0 and Q4_0 matmul_packed match a JavaScript reference on the browser's adapter", async () => {
  const results = await page.evaluate(async (code) => {
    const device = await (await navigator.gpu.requestAdapter()).requestDevice();
    const module = device.createShaderModule({ code });
    let seed = 12345;
    const rnd = () => { seed = (seed * 1103515245 + 12345) >>> 0; return seed / 2 ** 32; };
    // f16 scales as raw bits with their values (exact in f32): positive, negative, and a subnormal.
    const scales = [[0x3800, 0.5], [0x3400, 0.25], [0xB000, -0.125], [0x3C00, 1.0], [0x0001, 2 ** -24]];
    const out = [];
    for (const [name, wdt, blockBytes] of [["Q8_0", 2, 34], ["Q4_0", 3, 18]]) {
      // K/32 = 1, 2, 3: one block per row, an even count, an odd count (alignment alternates between columns).
      for (const [M, N, K] of [[1, 1, 32], [5, 9, 64], [33, 70, 96]]) {
        const nb = K / 32;
        const bytes = new Uint8Array(Math.ceil((N * nb * blockBytes + 4) / 16) * 16); // + the spare word, as upload pads
        const w = new Float32Array(N * K); // the decoded weights, for the reference
        for (let n = 0; n < N; n++) for (let b = 0; b < nb; b++) {
          const o = (n * nb + b) * blockBytes;
          const [bits, d] = scales[Math.floor(rnd() * scales.length)];
          bytes[o] = bits & 0xff;
          bytes[o + 1] = bits >> 8;
          if (wdt === 2) {
            for (let j = 0; j < 32; j++) {
              const q = Math.floor(rnd() * 255) - 127;
              bytes[o + 2 + j] = q & 0xff;
              w[n * K + b * 32 + j] = q * d;
            }
          } else {
            for (let j = 0; j < 16; j++) {
              const lo = Math.floor(rnd() * 16), hi = Math.floor(rnd() * 16);
              bytes[o + 2 + j] = lo | (hi << 4);
              w[n * K + b * 32 + j] = (lo - 8) * d;
              w[n * K + b * 32 + 16 + j] = (hi - 8) * d;
            }
          }
        }
        const x = new Float32Array(M * K).map(() => rnd() * 2 - 1);
        const bias = new Float32Array(Math.max(N, 4)).map(() => rnd() * 2 - 1);
        const buffer = (data, usage) => {
          const b = device.createBuffer({ size: Math.ceil(data.byteLength / 16) * 16, usage, mappedAtCreation: true });
          new Uint8Array(b.getMappedRange()).set(new Uint8Array(data.buffer));
          b.unmap();
          return b;
        };
        const S = GPUBufferUsage.STORAGE;
        const y = device.createBuffer({ size: Math.ceil((M * N * 4) / 16) * 16, usage: S | GPUBufferUsage.COPY_SRC });
        const back = device.createBuffer({ size: y.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
        const pipeline = await device.createComputePipelineAsync({
          layout: "auto", compute: { module, entryPoint: "matmul_packed", constants: { WDT: wdt, HAS_BIAS: 1 } },
        });
        const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [
          { binding: 0, resource: { buffer: buffer(new Uint32Array([M, N, K, 0]), GPUBufferUsage.UNIFORM) } },
          { binding: 1, resource: { buffer: buffer(x, S) } },
          { binding: 3, resource: { buffer: buffer(bias, S) } },
          { binding: 4, resource: { buffer: y } },
          { binding: 6, resource: { buffer: buffer(bytes, S) } },
        ] });
        const enc = device.createCommandEncoder();
        const pass = enc.beginComputePass();
        pass.setPipeline(pipeline);
        pass.setBindGroup(0, group);
        pass.dispatchWorkgroups(Math.ceil(N / 64), Math.ceil(M / 32)); // 8×8 workgroups of 8 columns × 4 rows
        pass.end();
        enc.copyBufferToBuffer(y, 0, back, 0, y.size);
        device.queue.submit([enc.finish()]);
        await back.mapAsync(GPUMapMode.READ);
        const got = new Float32Array(back.getMappedRange().slice(0));
        // Tolerance: the decoded weights are exact in f32 on both sides, so only the K-term f32 sum differs from the
        // f64 reference: 1e-5 + 1e-5·K·|ref| (a wrong block, scale or nibble is off by ≥ 2⁻⁸ of a term).
        let worst = { ratio: 0 };
        for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) {
          let s = bias[n];
          for (let k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
          const ratio = Math.abs(s - got[m * N + n]) / (1e-5 + 1e-5 * K * Math.abs(s));
          if (!(ratio <= worst.ratio) && !Number.isNaN(worst.ratio)) worst = { ratio, m, n, got: got[m * N + n], want: s };
        }
        out.push({ what: `${name} M=${M} N=${N} K=${K}`, ...worst });
      }
    }
    return out;
  }, composeWgsl("matmul_packed.wgsl").text);
  assert.equal(results.length, 6, "2 formats × 3 shapes");
  for (const r of results) {
    assert.ok(r.ratio <= 1, `${r.what}: worst at row ${r.m} column ${r.n}: got ${r.got}, want ${r.want}`);
  }
});
