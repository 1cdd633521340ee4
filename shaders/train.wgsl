// train.wgsl: the ops of head training (src/training/head.rs states the math): a matmul with optional transposes,
// the softmax cross-entropy gradient, activation derivatives and the AdamW update. Heads are small (a few
// thousand parameters, batches of tens of rows), so these kernels are plain one-invocation-per-output loops.
//
// Bindings (group 0), by entry point:
//   0  p       uniform Params (all)
//   matmul_t:   1 a (K, M) or (M, K) f32, 2 b (N, K) or (K, N) f32, 3 y (M, N) f32
//   xent_grad:  1 a logits (B, C) f32, 4 labels (B) u32 (validated < C on the host), 3 y (B, C) f32
//   act_grad:   1 a dy (len) f32, 2 b pre-activation (len) f32, 3 y (len) f32
//   adamw:      1 a param, 2 b grad, 6 m, 7 v (len each) f32; 3 y new param, 9 m_out, 10 v_out (len each) f32
//
// Params by entry point: matmul_t (m, n, k, flags: bit 0 = transpose a, bit 1 = transpose b); xent_grad
// (m = rows, n = classes); act_grad (m = len, flags = activation code of lib/activations.wgsl);
// adamw (m = len, and the step's scalars lr, wd, beta1, beta2, eps, bc1 = 1 − β1ᵗ, bc2_sqrt = √(1 − β2ᵗ), and
// grad_scale, which multiplies the gradient first: clipping by global norm).

#include "lib/activations.wgsl"

struct Params {
    m: u32,
    n: u32,
    k: u32,
    flags: u32,
    lr: f32,
    wd: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    bc1: f32,
    bc2_sqrt: f32,
    grad_scale: f32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> labels: array<u32>;
@group(0) @binding(6) var<storage, read> m_in: array<f32>;
@group(0) @binding(7) var<storage, read> v_in: array<f32>;
@group(0) @binding(9) var<storage, read_write> m_out: array<f32>;
@group(0) @binding(10) var<storage, read_write> v_out: array<f32>;

fn index(lid: u32, wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// y (M, N) = op(a) · op(b): element (i, l) of op(a) is a[l*M + i] when transposed, else a[i*K + l].
@compute @workgroup_size(WG)
fn matmul_t(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = index(lid, wid, nwg);
    if idx >= p.m * p.n {
        return;
    }
    let i = idx / p.n;
    let j = idx % p.n;
    let ta = (p.flags & 1u) != 0u;
    let tb = (p.flags & 2u) != 0u;
    var acc = 0.0;
    for (var l = 0u; l < p.k; l++) {
        let av = select(a[i * p.k + l], a[l * p.m + i], ta);
        let bv = select(b[l * p.n + j], b[j * p.k + l], tb);
        acc = fma(av, bv, acc);
    }
    y[idx] = acc;
}

// One row per invocation: y = (softmax(z) − onehot(label)) / B, the max subtracted before exp.
@compute @workgroup_size(WG)
fn xent_grad(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = index(lid, wid, nwg);
    if r >= p.m {
        return;
    }
    let base = r * p.n;
    var mx = a[base];
    for (var j = 1u; j < p.n; j++) {
        mx = max(mx, a[base + j]);
    }
    var sum = 0.0;
    for (var j = 0u; j < p.n; j++) {
        sum += exp(a[base + j] - mx);
    }
    let inv_b = 1.0 / f32(p.m);
    let label = labels[r];
    for (var j = 0u; j < p.n; j++) {
        let onehot = select(0.0, 1.0, j == label);
        y[base + j] = (exp(a[base + j] - mx) / sum - onehot) * inv_b;
    }
}

// y = dy ⊙ act'(pre) (lib/activations.wgsl).
@compute @workgroup_size(WG)
fn act_grad(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(lid, wid, nwg);
    if i >= p.m {
        return;
    }
    y[i] = a[i] * activate_grad(p.flags, b[i]);
}

// torch.optim.AdamW, one element per invocation, on the gradient times grad_scale: decoupled decay on the old p, the
// moments, then the bias-corrected step with eps added after √v / √bc2.
@compute @workgroup_size(WG)
fn adamw(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(lid, wid, nwg);
    if i >= p.m {
        return;
    }
    let g = b[i] * p.grad_scale;
    let param = a[i] * (1.0 - p.lr * p.wd);
    let m = p.beta1 * m_in[i] + (1.0 - p.beta1) * g;
    let v = p.beta2 * v_in[i] + (1.0 - p.beta2) * g * g;
    let denom = sqrt(v) / p.bc2_sqrt + p.eps;
    y[i] = param - (p.lr / p.bc1) * m / denom;
    m_out[i] = m;
    v_out[i] = v;
}
