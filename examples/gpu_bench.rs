//! GPU benchmarks (BENCHMARKS.md), on whatever adapter wgpu finds (lavapipe here):
//! - `cargo run --example gpu_bench -- matmul`: GFLOP/s of the kept matmul (several workgroup shapes) against the
//!   slower variants tried and the CPU backend, at BERT shapes.
//! - `cargo run --example gpu_bench -- forward`: all-MiniLM-L6-v2, batch 8 × 128, GPU vs CPU backend (and PyTorch
//!   when `PYTHON` names an interpreter with torch + transformers), plus each kernel's share of the GPU forward
//!   from timestamp queries.
//! Wall-clock medians after a warm-up run; the variants run round-robin so a busy machine slows all alike.

use std::time::Instant;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{Gpu, GpuBackend, GpuTensor, Tuning};
use bertgpu::backend::{Activation, Backend};
use bertgpu::weights::{HostData, HostTensor};

const SHAPES: [(usize, usize, usize); 3] = [(1024, 384, 1536), (1024, 1536, 384), (128, 768, 3072)];

fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n).map(|_| { s ^= s << 13; s ^= s >> 7; s ^= s << 17; ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0 }).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Wall-clock ms of one `linear` (M, K) × (N, K)ᵀ + bias, recorded, submitted and waited for.
fn time_linear(g: &GpuBackend, x: &GpuTensor, w: &GpuTensor, b: &GpuTensor) -> f64 {
    let t0 = Instant::now();
    let y = g.linear(x, w, Some(b), Activation::None).unwrap();
    pollster::block_on(g.flush()).unwrap();
    drop(y);
    t0.elapsed().as_secs_f64() * 1e3
}

/// The variants are timed round-robin (one run of each, repeated), so a busy machine slows all of them alike and
/// the ratios stay meaningful; each cell is the median.
fn matmul() {
    let reps: usize = std::env::var("REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let wgs = bench_wgs();
    let backends: Vec<GpuBackend> = wgs.iter()
        .map(|&wg| GpuBackend::with_tuning(Gpu::new_blocking().unwrap(), Tuning { matmul_wg: wg, ..Default::default() }).unwrap())
        .collect();
    let raw = Gpu::new_blocking().unwrap();
    let cpu = CpuBackend::new();
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    for &(m, k, n) in &SHAPES {
        let (xv, wv, bv) = (rand_vec(m * k, 1), rand_vec(n * k, 2), rand_vec(n, 3));
        let host = |shape: Vec<usize>, d: &Vec<f32>| HostTensor { shape, data: HostData::F32(d.clone()) };
        let ins: Vec<_> = backends.iter().map(|g| (g.input(&xv, m, k).unwrap(), g.upload(&host(vec![n, k], &wv)).unwrap(),
            g.upload(&host(vec![n], &bv)).unwrap())).collect();
        let (cx, cw, cb) = (cpu.input(&xv, m, k).unwrap(), cpu.upload(&host(vec![n, k], &wv)).unwrap(),
            cpu.upload(&host(vec![n], &bv)).unwrap());
        let rawk: Vec<RawKernel> = RAW_KERNELS.iter().map(|(name, src, tile)| RawKernel::new(&raw, name, src, *tile, m, k, n, &xv, &wv)).collect();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); backends.len() + rawk.len() + 1];
        for rep in 0..=reps {
            let mut col = Vec::new();
            for (g, (x, w, b)) in backends.iter().zip(&ins) {
                col.push(time_linear(g, x, w, b));
            }
            for r in &rawk {
                col.push(r.time(&raw));
            }
            let t0 = Instant::now();
            let y = cpu.linear(&cx, &cw, Some(&cb), Activation::None).unwrap();
            col.push(t0.elapsed().as_secs_f64() * 1e3);
            drop(y);
            if rep > 0 { // rep 0 warms up (pipeline compilation)
                for (t, v) in times.iter_mut().zip(col) { t.push(v); }
            }
        }
        let names: Vec<String> = wgs.iter().map(|wg| format!("4×4/thread vec4 (kept), workgroup {}×{}", wg.0, wg.1))
            .chain(RAW_KERNELS.iter().map(|k| k.0.to_string()))
            .chain(["CPU backend (rayon, 2 threads)".to_string()]).collect();
        for (i, (name, t)) in names.into_iter().zip(times).enumerate() {
            let ms = median(t);
            if rows.len() <= i { rows.push((name, Vec::new())); }
            rows[i].1.push(ms);
        }
    }
    println!("| kernel | {} |", SHAPES.map(|(m, k, n)| format!("{m}×{k}×{n}")).join(" | "));
    println!("|---|---|---|---|");
    for (name, ms) in rows {
        let cells: Vec<String> = ms.iter().zip(SHAPES).map(|(ms, (m, k, n))|
            format!("{:.2} GFLOP/s ({ms:.0} ms)", 2.0 * (m * k * n) as f64 / ms / 1e6)).collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
}

/// Slower variants measured against the kept kernel (BENCHMARKS.md). Same bindings: 0 params (m, n, k), 1 x (M, K),
/// 2 w (N, K), 3 y (M, N). `tile`: outputs per workgroup (columns, rows).
const RAW_KERNELS: &[(&str, &str, (u32, u32))] = &[
    ("4×8/thread vec4, workgroup 8×8 (K % 4 == 0 only)", r#"
struct P { m: u32, n: u32, k: u32, _p: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let c0 = g.x * 8u; let r0 = g.y * 4u;
    if c0 >= p.n || r0 >= p.m { return; }
    let k4 = p.k / 4u;
    var xr: array<u32, 4>; var wc: array<u32, 8>;
    for (var i = 0u; i < 4u; i++) { xr[i] = min(r0 + i, p.m - 1u) * k4; }
    for (var j = 0u; j < 8u; j++) { wc[j] = min(c0 + j, p.n - 1u) * k4; }
    var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
    var b0 = vec4<f32>(0.0); var b1 = vec4<f32>(0.0); var b2 = vec4<f32>(0.0); var b3 = vec4<f32>(0.0);
    let x0 = xr[0]; let x1 = xr[1]; let x2 = xr[2]; let x3 = xr[3];
    let w0 = wc[0]; let w1 = wc[1]; let w2 = wc[2]; let w3 = wc[3]; let w4 = wc[4]; let w5 = wc[5]; let w6 = wc[6]; let w7 = wc[7];
    for (var kk = 0u; kk < k4; kk++) {
        let u0 = x[x0 + kk]; let u1 = x[x1 + kk]; let u2 = x[x2 + kk]; let u3 = x[x3 + kk];
        let v0 = w[w0 + kk]; let v1 = w[w1 + kk]; let v2 = w[w2 + kk]; let v3 = w[w3 + kk];
        let v4 = w[w4 + kk]; let v5 = w[w5 + kk]; let v6 = w[w6 + kk]; let v7 = w[w7 + kk];
        a0 += vec4(dot(u0, v0), dot(u0, v1), dot(u0, v2), dot(u0, v3)); b0 += vec4(dot(u0, v4), dot(u0, v5), dot(u0, v6), dot(u0, v7));
        a1 += vec4(dot(u1, v0), dot(u1, v1), dot(u1, v2), dot(u1, v3)); b1 += vec4(dot(u1, v4), dot(u1, v5), dot(u1, v6), dot(u1, v7));
        a2 += vec4(dot(u2, v0), dot(u2, v1), dot(u2, v2), dot(u2, v3)); b2 += vec4(dot(u2, v4), dot(u2, v5), dot(u2, v6), dot(u2, v7));
        a3 += vec4(dot(u3, v0), dot(u3, v1), dot(u3, v2), dot(u3, v3)); b3 += vec4(dot(u3, v4), dot(u3, v5), dot(u3, v6), dot(u3, v7));
    }
    var acc = array<vec4<f32>, 8>(a0, b0, a1, b1, a2, b2, a3, b3);
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + i;
        for (var j = 0u; j < 8u; j++) {
            let c = c0 + j;
            if r < p.m && c < p.n { y[r * p.n + c] = acc[i * 2u + j / 4u][j % 4u]; }
        }
    }
}"#, (64, 32)),
    ("naive: one output per invocation, 16×16", r#"
struct P { m: u32, n: u32, k: u32, _p: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if g.x >= p.n || g.y >= p.m { return; }
    var s = 0.0;
    for (var k = 0u; k < p.k; k++) { s += x[g.y * p.k + k] * w[g.x * p.k + k]; }
    y[g.y * p.n + g.x] = s;
}"#, (16, 16)),
    ("16×16 workgroup-memory tiles, one output per invocation", r#"
struct P { m: u32, n: u32, k: u32, _p: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<workgroup> xs: array<f32, 256>;
var<workgroup> ws: array<f32, 256>;
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let row = wg.y * 16u + l.y;
    let col = wg.x * 16u + l.x;
    var s = 0.0;
    for (var k0 = 0u; k0 < p.k; k0 += 16u) {
        let xr = min(row, p.m - 1u); let wr = min(wg.x * 16u + l.y, p.n - 1u);
        xs[l.y * 16u + l.x] = select(0.0, x[xr * p.k + k0 + l.x], k0 + l.x < p.k);
        ws[l.y * 16u + l.x] = select(0.0, w[wr * p.k + k0 + l.x], k0 + l.x < p.k);
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) { s += xs[l.y * 16u + kk] * ws[l.x * 16u + kk]; }
        workgroupBarrier();
    }
    if row < p.m && col < p.n { y[row * p.n + col] = s; }
}"#, (16, 16)),
    ("4×4/thread, 16×16 workgroup-memory tiles (64×64 per workgroup)", r#"
struct P { m: u32, n: u32, k: u32, _p: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<workgroup> xs: array<vec4<f32>, 1024>; // (64 rows, 16 k) as (16 k, 64 rows / 4)
var<workgroup> ws: array<vec4<f32>, 1024>;
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let li = l.y * 16u + l.x;
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += 16u) {
        // 256 invocations load 64 rows × 16 k of x and of w, 4 values each.
        for (var e = 0u; e < 4u; e++) {
            let idx = li * 4u + e;            // 0..1024 = (row 0..64, kk 0..16)
            let r = idx / 16u; let kk = idx % 16u;
            let xr = min(wg.y * 64u + r, p.m - 1u); let wr = min(wg.x * 64u + r, p.n - 1u);
            let ok = k0 + kk < p.k;
            let xv = select(0.0, x[xr * p.k + k0 + kk], ok);
            let wv = select(0.0, w[wr * p.k + k0 + kk], ok);
            xs[kk * 16u + r / 4u][r % 4u] = xv;
            ws[kk * 16u + r / 4u][r % 4u] = wv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            let a = xs[kk * 16u + l.y];
            let b = ws[kk * 16u + l.x];
            acc[0] += a.x * b; acc[1] += a.y * b; acc[2] += a.z * b; acc[3] += a.w * b;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row = wg.y * 64u + l.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let col = wg.x * 64u + l.x * 4u + j;
            if row < p.m && col < p.n { y[row * p.n + col] = acc[i][j]; }
        }
    }
}"#, (64, 64)),
];

struct RawKernel {
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    groups: (u32, u32),
}

impl RawKernel {
    #[allow(clippy::too_many_arguments)]
    fn new(g: &Gpu, name: &str, src: &str, tile: (u32, u32), m: usize, k: usize, n: usize, x: &[f32], w: &[f32]) -> RawKernel {
        use wgpu::util::DeviceExt;
        let d = &g.device;
        let module = d.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(src.into()) });
        let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name), layout: None, module: &module, entry_point: Some("main"),
            compilation_options: Default::default(), cache: None,
        });
        let st = wgpu::BufferUsages::STORAGE;
        let params = [m as u32, n as u32, k as u32, 0];
        let pb = d.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(&params), usage: wgpu::BufferUsages::UNIFORM });
        let xb = d.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(x), usage: st });
        let wb = d.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: bytemuck::cast_slice(w), usage: st });
        let yb = d.create_buffer(&wgpu::BufferDescriptor { label: None, size: (m * n * 4) as u64, usage: st, mapped_at_creation: false });
        let bind = d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None, layout: &pipeline.get_bind_group_layout(0),
            entries: &[pb, xb, wb, yb].iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() }).collect::<Vec<_>>(),
        });
        RawKernel { pipeline, bind, groups: ((n as u32).div_ceil(tile.0), (m as u32).div_ceil(tile.1)) }
    }

    fn time(&self, g: &Gpu) -> f64 {
        let t0 = Instant::now();
        let mut enc = g.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.bind, &[]);
            pass.dispatch_workgroups(self.groups.0, self.groups.1, 1);
        }
        g.queue.submit(Some(enc.finish()));
        g.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        t0.elapsed().as_secs_f64() * 1e3
    }
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "matmul".into());
    let g = Gpu::new_blocking().unwrap();
    eprintln!("adapter: {} ({:?})", g.info.name, g.info.device_type);
    drop(g);
    match what.as_str() {
        "matmul" => matmul(),
        "forward" => forward(),
        other => eprintln!("unknown benchmark {other}: matmul | forward"),
    }
}

/// Workgroup shapes to compare: `WGS="16x4,32x4"` or the default list.
fn bench_wgs() -> Vec<(u32, u32)> {
    let spec = std::env::var("WGS").unwrap_or_else(|_| "8x8,16x16,16x4,32x4,64x4,32x8".into());
    spec.split(',').filter_map(|s| {
        let (a, b) = s.split_once('x')?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    }).collect()
}

/// all-MiniLM-L6-v2 forward + mean pool, batch 8 × 128 tokens (every token real).
fn forward() {
    use bertgpu::config::BertConfig;
    use bertgpu::model::BertModel;
    use bertgpu::tokenizer::Batch;
    use bertgpu::weights::Weights;
    let reps: usize = std::env::var("REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let w = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let (b, t) = (8usize, 128usize);
    let ids = rand_vec(b * t, 5);
    let mut batch = Batch { b, t, ..Default::default() };
    for (i, v) in ids.iter().enumerate() {
        let id = match i % t { 0 => 101, j if j == t - 1 => 102, _ => 1000 + ((v + 1.0) * 14000.0) as u32 };
        batch.input_ids.push(id);
        batch.token_type_ids.push(0);
        batch.attention_mask.push(1);
    }
    let g = GpuBackend::new(Gpu::new_blocking().unwrap()).unwrap();
    let gm = BertModel::load(&w, &cfg, &g).unwrap();
    let cpu = CpuBackend::new();
    let cm = BertModel::load(&w, &cfg, &cpu).unwrap();
    fn run<B: Backend>(be: &B, m: &BertModel<B>, batch: &Batch) -> (f64, Vec<f32>) {
        let t0 = Instant::now();
        let mask = be.mask(batch).unwrap();
        let hidden = m.forward_with_mask(be, batch, &mask).unwrap();
        let pooled = be.mean_pool(&hidden, &mask, batch.b, batch.t).unwrap();
        let v = pollster::block_on(be.read(&pooled)).unwrap();
        (t0.elapsed().as_secs_f64() * 1e3, v)
    }
    let (mut tg, mut tc) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        let (a, va) = run(&g, &gm, &batch);
        let (c, vc) = run(&cpu, &cm, &batch);
        let err = va.iter().zip(&vc).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(err < 1e-3, "GPU and CPU forwards disagree by {err}");
        if rep > 0 {
            tg.push(a);
            tc.push(c);
        }
    }
    let (tg, tc) = (median(tg), median(tc));
    // FLOPs: per layer the four linears 2·M·(3H² + H² + 2·H·I) and attention 2·2·B·heads·T²·d.
    let (h, inter, l) = (cfg.hidden_size as f64, cfg.intermediate_size as f64, cfg.num_hidden_layers as f64);
    let m = (b * t) as f64;
    let flops = l * (2.0 * m * (4.0 * h * h + 2.0 * h * inter) + 4.0 * m * t as f64 * h);
    println!("all-MiniLM-L6-v2, batch {b} × {t}, forward + mean pool + read-back ({:.1} GFLOP):", flops / 1e9);
    println!("| backend | ms (median of {reps}) | GFLOP/s | time / GPU time |");
    println!("|---|---|---|---|");
    println!("| GPU backend ({}) | {tg:.0} | {:.2} | 1.00 |", g.gpu().info.name, flops / tg / 1e6);
    println!("| CPU backend | {tc:.0} | {:.2} | {:.3} |", flops / tc / 1e6, tc / tg);
    if let Ok(py) = std::env::var("PYTHON") {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/torch_forward.py");
        let out = std::process::Command::new(py).arg(script).arg(&dir).arg(reps.to_string()).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if let Ok(tp) = text.trim().parse::<f64>() {
            println!("| PyTorch (CPU, fp32) | {tp:.0} | {:.2} | {:.3} |", flops / tp / 1e6, tp / tg);
        } else {
            eprintln!("PyTorch run failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    // Per-kernel GPU time from timestamp queries, one more forward.
    if g.enable_profiling() {
        run(&g, &gm, &batch);
        let prof = g.take_profile();
        let total: f64 = prof.iter().map(|e| e.1).sum();
        println!();
        println!("GPU time per kernel (timestamp queries), one forward: {total:.0} ms in passes");
        println!("| kernel | passes | ms | share |");
        println!("|---|---|---|---|");
        for (name, ms, n) in prof {
            println!("| {name} | {n} | {ms:.1} | {:.1}% |", 100.0 * ms / total);
        }
    }
}
