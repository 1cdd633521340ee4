// train.wgsl: the ops of head training (src/training/head.rs states the math): a matmul with optional transposes,
// the softmax cross-entropy gradient, activation derivatives and the AdamW update; fine-tuning the encoder uses the
// matmul for every GEMM of the backward (dW = dYᵀ·X, dX = dY·W), so it is tiled (4×8 outputs per invocation; where
// a real GPU's calibration chose the forward's wide tiling, the host runs that kernel instead, on operands made
// K-contiguous by backward.wgsl's transpose_pad); the others are plain one-invocation-per-output loops.
//
// Bindings (group 0), by entry point:
//   0  p       uniform Params (all)
//   matmul_t:   1 a (K, M) or (M, K) f32, 2 b (N, K) or (K, N) f32, 3 y (M, N) f32
//   xent_grad:  1 a logits (B, C) f32, 4 labels (B) u32 (validated < C on the host), 3 y (B, C) f32
//   act_grad:   1 a dy (len) f32, 2 b pre-activation (len) f32, 3 y (len) f32
//   adamw:      1 a param, 2 b grad, 6 m, 7 v (len each) f32, 5 norm_sq (1) f32; 3 y new param, 9 m_out, 10 v_out
//               (len each) f32
//
// Params by entry point: matmul_t (m, n, k, flags: bit 0 = transpose a, bit 1 = transpose b); xent_grad
// (m = rows, n = classes); act_grad (m = len, flags = activation code of lib/activations.wgsl);
// adamw (m = len, and the step's scalars lr, wd, beta1, beta2, eps, bc1 = 1 − β1ᵗ, bc2_sqrt = √(1 − β2ᵗ),
// grad_scale, which multiplies the gradient first, and max_norm; flags: bit 1 = norm_sq holds the squared global norm
// of the unscaled gradients (no update where it is not finite), bit 0 = clip by it to max_norm, as
// torch.nn.utils.clip_grad_norm_ does).

#include "lib/activations.wgsl"
#include "lib/workgroup_2d.wgsl"

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
    max_norm: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// Workgroup size of the elementwise entry points (matmul_t's shape is lib/workgroup_2d.wgsl's).
override WG: u32 = 64u;
// matmul_t's run length along K (see there).
const KC: u32 = 32u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> labels: array<u32>;
@group(0) @binding(5) var<storage, read> norm_sq: array<f32>;
@group(0) @binding(6) var<storage, read> m_in: array<f32>;
@group(0) @binding(7) var<storage, read> v_in: array<f32>;
@group(0) @binding(9) var<storage, read_write> m_out: array<f32>;
@group(0) @binding(10) var<storage, read_write> v_out: array<f32>;

fn index(lid: u32, wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// y (M, N) = op(a) · op(b), a 4×8 block of y per invocation (workgroup WG_X × WG_Y), as an outer product per step
// along K: element (i, l) of op(a) is a[i·sa_r + l·sa_k] with (sa_r, sa_k) = (1, M) when transposed, else (K, 1);
// element (l, j) of op(b) is b[l·sb_k + j·sb_c] with (sb_k, sb_c) = (1, K) when transposed, else (N, 1). Per step
// it loads the 4 values of op(a)'s column l in rows r0..r0+4 and the 8 of op(b)'s row l in columns c0..c0+8 (12
// loads for 32 fma), one step of K at a time so any K works; each of those 12 streams moves by a fixed stride per
// step (one element or one row), so every transpose is the same loop with other strides. Rows/columns past the edge
// are clamped for loading and masked on store. Each output is summed with fma in runs of KC values of l, the runs'
// sums added in order. (Not lib/matmul_tile.wgsl's tile: that one takes dot products of K-contiguous vec4 rows of
// both operands, K % 4 == 0, while here K is the strided axis of a transposed a or an untransposed b.)
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_t(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c0 = gid.x * 8u;
    let r0 = gid.y * 4u;
    if c0 >= p.n || r0 >= p.m {
        return;
    }
    let ta = (p.flags & 1u) != 0u;
    let tb = (p.flags & 2u) != 0u;
    let sa_r = select(p.k, 1u, ta);
    let sa_k = select(1u, p.m, ta);
    let sb_c = select(1u, p.k, tb);
    let sb_k = select(p.n, 1u, tb);
    let ar = vec4<u32>(min(r0, p.m - 1u), min(r0 + 1u, p.m - 1u), min(r0 + 2u, p.m - 1u), min(r0 + 3u, p.m - 1u)) * sa_r;
    let c = vec4<u32>(c0, c0 + 1u, c0 + 2u, c0 + 3u);
    let bc0 = min(c, vec4<u32>(p.n - 1u)) * sb_c;
    let bc1 = min(c + 4u, vec4<u32>(p.n - 1u)) * sb_c;
    // Row r0 + i's outputs: accI for columns c0..c0+4, bccI for columns c0+4..c0+8.
    var acc0 = vec4<f32>(0.0);
    var bcc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var bcc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var bcc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var bcc3 = vec4<f32>(0.0);
    var ao = 0u;  // l·sa_k
    var bo = 0u;  // l·sb_k
    // Runs of KC steps summed apart, then added to the totals: the rounding error grows like KC + K/KC steps, not K.
    for (var l0 = 0u; l0 < p.k; l0 += KC) {
        var s0 = vec4<f32>(0.0);
        var s1 = vec4<f32>(0.0);
        var s2 = vec4<f32>(0.0);
        var s3 = vec4<f32>(0.0);
        var t0 = vec4<f32>(0.0);
        var t1 = vec4<f32>(0.0);
        var t2 = vec4<f32>(0.0);
        var t3 = vec4<f32>(0.0);
        let l1 = min(l0 + KC, p.k);
        for (var l = l0; l < l1; l++) {
            let av = vec4<f32>(a[ao + ar.x], a[ao + ar.y], a[ao + ar.z], a[ao + ar.w]);
            let b0 = vec4<f32>(b[bo + bc0.x], b[bo + bc0.y], b[bo + bc0.z], b[bo + bc0.w]);
            let b1 = vec4<f32>(b[bo + bc1.x], b[bo + bc1.y], b[bo + bc1.z], b[bo + bc1.w]);
            s0 = fma(vec4<f32>(av.x), b0, s0);
            s1 = fma(vec4<f32>(av.y), b0, s1);
            s2 = fma(vec4<f32>(av.z), b0, s2);
            s3 = fma(vec4<f32>(av.w), b0, s3);
            t0 = fma(vec4<f32>(av.x), b1, t0);
            t1 = fma(vec4<f32>(av.y), b1, t1);
            t2 = fma(vec4<f32>(av.z), b1, t2);
            t3 = fma(vec4<f32>(av.w), b1, t3);
            ao += sa_k;
            bo += sb_k;
        }
        acc0 += s0;
        acc1 += s1;
        acc2 += s2;
        acc3 += s3;
        bcc0 += t0;
        bcc1 += t1;
        bcc2 += t2;
        bcc3 += t3;
    }
    store_row(r0, c0, acc0);
    store_row(r0 + 1u, c0, acc1);
    store_row(r0 + 2u, c0, acc2);
    store_row(r0 + 3u, c0, acc3);
    store_row(r0, c0 + 4u, bcc0);
    store_row(r0 + 1u, c0 + 4u, bcc1);
    store_row(r0 + 2u, c0 + 4u, bcc2);
    store_row(r0 + 3u, c0 + 4u, bcc3);
}

// Columns c0..c0+4 of row r of y (matmul_t), those inside (M, N).
fn store_row(r: u32, c0: u32, v: vec4<f32>) {
    if r >= p.m {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if c0 + j < p.n {
            y[r * p.n + c0 + j] = v[j];
        }
    }
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

// Whether v is infinite or NaN, from its bits: WGSL lets a compiler assume floats are finite, so `v != v` may be
// folded away.
fn non_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u;
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
    var scale = p.grad_scale;
    if (p.flags & 2u) != 0u {
        let norm = sqrt(norm_sq[0]) * p.grad_scale;
        if non_finite(norm) {
            // A NaN or infinite loss: this step changes nothing.
            y[i] = a[i];
            m_out[i] = m_in[i];
            v_out[i] = v_in[i];
            return;
        }
        if (p.flags & 1u) != 0u {
            scale = p.grad_scale * min(1.0, p.max_norm / (norm + 1e-6));
        }
    }
    let g = b[i] * scale;
    let param = a[i] * (1.0 - p.lr * p.wd);
    let m = p.beta1 * m_in[i] + (1.0 - p.beta1) * g;
    let v = p.beta2 * v_in[i] + (1.0 - p.beta2) * g * g;
    let denom = sqrt(v) / p.bc2_sqrt + p.eps;
    y[i] = param - (p.lr / p.bc1) * m / denom;
    m_out[i] = m;
    v_out[i] = v;
}
