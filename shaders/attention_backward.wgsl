// attention_backward.wgsl: back through the attention of lib/attention.wgsl (the math: `Backend::attention_backward`
// in src/backend/mod.rs; the CPU twin: src/backend/cpu/attention.rs `attention_backward`). Per (sequence b, head h),
// with P = softmax(q·kᵀ·scale + maskbias):
//   dv = Pᵀ·dctx,  dP = dctx·vᵀ,  dS = P ⊙ (dP − rowsum(dP ⊙ P))·scale,  dq = dS·k,  dk = dSᵀ·q
//
// Bindings (group 0):
//   0  p     uniform Params { batch = B, seq = T, heads, head_dim = d, hidden = H = heads·d, scale = 1/√d }
//   1  qkv   (B*T, 3H) f32   [q | k | v], head h at columns h*d..(h+1)*d of each third
//   2  mask  (B, T)    f32   0 = padding (such keys get probability 0)
//   3  dctx  (B*T, H)  f32
//   4  dqkv  (B*T, 3H) f32   [dq | dk | dv], every element written (dq by attn_bwd_queries, dk and dv by attn_bwd_keys)
//   5  probs (B*heads*T, T) f32  scratch: P, row (b, h, i) at ((b·heads + h)·T + i)·T
//   6  dsc   (B*heads*T, T) f32  scratch: dS (scale included), laid out as probs
//
// Two passes, no atomics: every output element is owned by one invocation.
//   attn_bwd_queries: one invocation per (query i, head, sequence), grid (ceil(T/WG), heads, B). Recomputes row i
//     of P as the forward does (max subtracted, exp, normalised; padding keys 0), then dP_i, the row's Σ P⊙dP, dS_i
//     and dq_i = Σ_j dS_ij·k_j in key order; writes P_i and dS_i to the scratch rows. A query whose keys are all
//     padding gets zeros everywhere.
//   attn_bwd_keys: one invocation per (key j, head, sequence), same grid: dk_j = Σ_i dS_ij·q_i and
//     dv_j = Σ_i P_ij·dctx_i, over the queries i in order (padding queries included, as on the CPU); a padding key
//     gets zeros.
//
// With the override DROPOUT = 1 (the forward dropped probabilities with the mask M of lib/dropout.wgsl, factor
// F = M·drop_scale): dP_ij = (dctx_i·v_j)·F_ij, dS from the undropped P as above, and the scratch P row holds
// P_ij·F_ij once dS is made, so that attn_bwd_keys's dv_j = Σ_i P_ij·F_ij·dctx_i.

#include "lib/attention_params.wgsl"

// Queries (or keys) per workgroup.
override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read> dctx: array<f32>;
@group(0) @binding(4) var<storage, read_write> dqkv: array<f32>;
@group(0) @binding(5) var<storage, read_write> probs: array<f32>;
@group(0) @binding(6) var<storage, read_write> dsc: array<f32>;

@compute @workgroup_size(WG)
fn attn_bwd_queries(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let d = p.head_dim;
    let H = p.hidden;
    let b = wid.z;
    let h = wid.y;
    let i = gid.x;
    if i >= T {
        return;
    }
    let stride = 3u * H;
    let qb = (b * T + i) * stride + h * d;   // q_i
    let cb = (b * T + i) * H + h * d;        // dctx_i
    let sb = ((b * p.heads + h) * T + i) * T; // scratch row (b, h, i)
    // Scores into the P row, and their max over the real keys.
    var mx = 0.0;
    var any = false;
    for (var j = 0u; j < T; j++) {
        var s = 0.0;
        if mask[b * T + j] != 0.0 {
            let kb = (b * T + j) * stride + H + h * d;
            for (var c = 0u; c < d; c++) {
                s += qkv[qb + c] * qkv[kb + c];
            }
            s *= p.scale;
            mx = select(s, max(mx, s), any);
            any = true;
        }
        probs[sb + j] = s;
    }
    var acc: array<f32, DMAX>;  // (d) dq_i
    for (var c = 0u; c < d; c++) {
        acc[c] = 0.0;
    }
    if !any {
        for (var j = 0u; j < T; j++) {
            probs[sb + j] = 0.0;
            dsc[sb + j] = 0.0;
        }
        for (var c = 0u; c < d; c++) {
            dqkv[qb + c] = 0.0;
        }
        return;
    }
    var sum = 0.0;
    for (var j = 0u; j < T; j++) {
        let e = select(0.0, exp(probs[sb + j] - mx), mask[b * T + j] != 0.0);
        probs[sb + j] = e;
        sum += e;
    }
    // P_ij, dP_ij = dctx_i·v_j (kept in the dS row for now) and Σ_j P_ij·dP_ij.
    var dot = 0.0;
    for (var j = 0u; j < T; j++) {
        var pj = 0.0;
        var dp = 0.0;
        if mask[b * T + j] != 0.0 {
            pj = probs[sb + j] / sum;
            let vb = (b * T + j) * stride + 2u * H + h * d;
            for (var c = 0u; c < d; c++) {
                dp += dctx[cb + c] * qkv[vb + c];
            }
            if DROPOUT != 0u {
                dp = select(0.0, dp * p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, sb + j));
            }
            dot += pj * dp;
        }
        probs[sb + j] = pj;
        dsc[sb + j] = dp;
    }
    for (var j = 0u; j < T; j++) {
        var ds = 0.0;
        if mask[b * T + j] != 0.0 {
            ds = probs[sb + j] * (dsc[sb + j] - dot) * p.scale;
            let kb = (b * T + j) * stride + H + h * d;
            for (var c = 0u; c < d; c++) {
                acc[c] += ds * qkv[kb + c];
            }
            if DROPOUT != 0u {
                let f = select(0.0, p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, sb + j));
                probs[sb + j] = probs[sb + j] * f;
            }
        }
        dsc[sb + j] = ds;
    }
    for (var c = 0u; c < d; c++) {
        dqkv[qb + c] = acc[c];
    }
}

@compute @workgroup_size(WG)
fn attn_bwd_keys(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let d = p.head_dim;
    let H = p.hidden;
    let b = wid.z;
    let h = wid.y;
    let j = gid.x;
    if j >= T {
        return;
    }
    let stride = 3u * H;
    let kb = (b * T + j) * stride + H + h * d;  // dk_j; dv_j is H further
    var dk: array<f32, DMAX>;
    var dv: array<f32, DMAX>;
    for (var c = 0u; c < d; c++) {
        dk[c] = 0.0;
        dv[c] = 0.0;
    }
    if mask[b * T + j] != 0.0 {
        for (var i = 0u; i < T; i++) {
            let s = ((b * p.heads + h) * T + i) * T + j;
            let ds = dsc[s];
            let pij = probs[s];
            let qb = (b * T + i) * stride + h * d;
            let cb = (b * T + i) * H + h * d;
            for (var c = 0u; c < d; c++) {
                dk[c] += ds * qkv[qb + c];
                dv[c] += pij * dctx[cb + c];
            }
        }
    }
    for (var c = 0u; c < d; c++) {
        dqkv[kb + c] = dk[c];
        dqkv[kb + H + c] = dv[c];
    }
}
