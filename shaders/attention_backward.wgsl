// attention_backward.wgsl: back through the attention of lib/attention.wgsl (the math: `Backend::attention_backward`
// in src/backend/mod.rs; the CPU twin: src/backend/cpu/attention.rs `attention_backward`). Per (sequence b, head h),
// with P = softmax(q·kᵀ·scale + maskbias):
//   dv = Pᵀ·dctx,  dP = dctx·vᵀ,  dS = P ⊙ (dP − rowsum(dP ⊙ P))·scale,  dq = dS·k,  dk = dSᵀ·q
//
// Bindings (group 0):
//   0  p     uniform Params { batch = B, seq = T, heads, head_dim = d, hidden = H = heads·d, scale = 1/√d }
//   1  qkv   (B*T, 3H) f32   [q | k | v], head h at columns h*d..(h+1)*d of each third
//   2  mask  (B, T)    f32   above 0.5 real, else padding (such keys get probability 0); below −0.5 a padded query
//                            marked as masked whole (`backend::UNIFORM_FILLED`, `UNIFORM_ADDED`): P_ij = 1/T
//   3  dctx  (B*T, H)  f32
//   4  dqkv  (B*T, 3H) f32   [dq | dk | dv], every element written (dq by attn_bwd_queries, dk and dv by attn_bwd_keys)
//   5  probs (B*heads*T, T) f32  scratch: P, row (b, h, i) at ((b·heads + h)·T + i)·T
//   6  dsc   (B*heads*T, T) f32  scratch: dS (scale included), laid out as probs
//
// Four passes, no atomics, every output element owned by one invocation, each pass's invocations independent (so a
// GPU runs B·heads·T·T or B·heads·T·d of them at once, not one per query walking every key in turn). Grids are
// (ceil(n/WG), heads, B) for n invocations per (sequence, head).
//   attn_bwd_scores: one invocation per (query i, key j): the score q_i·k_j·scale into probs, and dP_ij = dctx_i·v_j
//     into dsc, for a real key, or any key of a row marked UNIFORM_ADDED (a padding key's are left unread else).
//   attn_bwd_softmax: one invocation per query row i: P_i as the forward makes it (max subtracted, exp, normalised;
//     padding keys 0), Σ_j P_ij·dP_ij, then dS_i into dsc and P_i into probs. A query whose keys are all padding gets
//     zeros.
//   attn_bwd_queries: one invocation per (query i, column c of the head): dq_ic = Σ_j dS_ij·k_jc, keys in order.
//   attn_bwd_keys: one invocation per (key j, column c): dk_jc = Σ_i dS_ij·q_ic and dv_jc = Σ_i P_ij·dctx_ic, over
//     the queries i in order (padding queries included, as on the CPU); a padding key gets only a marked query's.
//
// With the override DROPOUT = 1 (the forward dropped probabilities with the mask M of lib/dropout.wgsl, factor
// F = M·drop_scale): dP_ij = (dctx_i·v_j)·F_ij, dS from the undropped P as above, and the scratch P row holds
// P_ij·F_ij once dS is made, so that attn_bwd_keys's dv_j = Σ_i P_ij·F_ij·dctx_i.
//
// With the override BIAS = 1 (back through `Backend::attention_biased`), attn_bwd_scores adds the relative bias
// `(heads, 2T − 1)` at binding 7 to each score as the forward did (BIAS = 0: the host binds the mask there, unread).
// A fifth pass then gives the bias's gradient when it is wanted:
//   attn_bwd_bias: one invocation per (head h, offset column c of 2T − 1): dbias[h][c] = Σ_b Σ_i dS_i,i+c−(T−1) / scale
//     (dS without the score scale, which the bias does not go through), sequences then queries in order, into
//     binding 8.
//
// With the override DISENTANGLED = 1 (back through `Backend::attention_disentangled` / `attention_dropout_disentangled`:
// DeBERTa; the CPU twin: src/backend/cpu/disentangled.rs), binding 7 holds the row index `rows` (1, 2T − 1) in the
// bias's place and binding 9 the projected relative table `pos` (R, 3H) = [posQ | posK | ·]; with r = rows[j − i + T −
// 1], attn_bwd_scores scores q_i·k_j + q_i·posK_r + k_j·posQ_r (times p.scale = 1/√(3d), set by the host), and with
// G = dS (scale included, as dsc holds it) attn_bwd_queries adds Σ_j G_ij·posK_r(i,j) to dq and attn_bwd_keys
// Σ_i G_ij·posQ_r(i,j) to dk (DISENTANGLED = 0: the host binds the mask at 9, unread). Two more passes give the table's
// gradient:
//   attn_bwd_pos: one workgroup per (WG of the H columns (head h, column c), offset o of 2T − 1): the offset's
//     sums Σ_b Σ_i G_ij·k_jc and Σ_b Σ_i G_ij·q_ic (j = i + o − (T − 1)), sequences then queries in order, into the
//     scratch pos_part (2T − 1, 2H) at binding 11. Every loop bound is the workgroup's, not the invocation's, which a
//     GPU emulated on the CPU (lavapipe) needs to run the loops once for all its lanes (a row per workgroup, its
//     offsets found per invocation, ran 3× slower).
//   attn_bwd_pos_rows: one workgroup per (WG columns of 2H, row r of R = p.pos_rows): dposQ_r = Σ over the offsets o
//     with rows[o] = r of pos_part's posQ half, dposK_r of its posK half, offsets in order, into binding 10 (R, 3H),
//     and the v third's zeros; the offsets are found once per workgroup, as bits in workgroup memory (a row no
//     offset reads gets zeros).

#include "lib/attention_params.wgsl"

// Invocations per workgroup.
override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read> dctx: array<f32>;
@group(0) @binding(4) var<storage, read_write> dqkv: array<f32>;
@group(0) @binding(5) var<storage, read_write> probs: array<f32>;
@group(0) @binding(6) var<storage, read_write> dsc: array<f32>;
@group(0) @binding(7) var<storage, read> score_bias: array<f32>;

// 1: the scores get the relative bias at binding 7; 0 (the default): none.
override BIAS: u32 = 0u;
// 1: DeBERTa's disentangled terms (rows at binding 7, pos at 9); 0 (the default): none.
override DISENTANGLED: u32 = 0u;
@group(0) @binding(9) var<storage, read> pos: array<f32>;

// The row of pos that query i and key j read.
fn rel_row(i: u32, j: u32) -> u32 {
    return u32(score_bias[j + p.seq - 1u - i]);
}

// Start of head h of pos's row r, posQ (part 0) or posK (1).
fn pos_at(r: u32, part: u32, h: u32) -> u32 {
    return r * 3u * p.hidden + part * p.hidden + h * p.head_dim;
}

// Start of scratch row (b, h, i).
fn row_of(b: u32, h: u32, i: u32) -> u32 {
    return ((b * p.heads + h) * p.seq + i) * p.seq;
}

// Start of head h of token t's q (part 0), k (1) or v (2) in qkv.
fn head_at(b: u32, t: u32, part: u32, h: u32) -> u32 {
    return (b * p.seq + t) * 3u * p.hidden + part * p.hidden + h * p.head_dim;
}

@compute @workgroup_size(WG)
fn attn_bwd_scores(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let b = wid.z;
    let h = wid.y;
    if gid.x >= T * T {
        return;
    }
    let i = gid.x / T;
    let j = gid.x % T;
    // Real keys only, except in a row marked UNIFORM_ADDED (−2), whose every score has a gradient.
    if mask[b * T + j] < 0.5 && mask[b * T + i] > -1.5 {
        return;
    }
    let qb = head_at(b, i, 0u, h);
    let kb = head_at(b, j, 1u, h);
    let vb = head_at(b, j, 2u, h);
    let cb = (b * T + i) * p.hidden + h * p.head_dim;
    var s = 0.0;
    var dp = 0.0;
    for (var c = 0u; c < p.head_dim; c++) {
        s += qkv[qb + c] * qkv[kb + c];
        dp += dctx[cb + c] * qkv[vb + c];
    }
    var bias = 0.0;
    if BIAS != 0u {
        bias = score_bias[h * (2u * T - 1u) + j + T - 1u - i];
    }
    if DISENTANGLED != 0u {
        let r = rel_row(i, j);
        let pq = pos_at(r, 0u, h);
        let pk = pos_at(r, 1u, h);
        for (var c = 0u; c < p.head_dim; c++) {
            s += qkv[qb + c] * pos[pk + c] + qkv[kb + c] * pos[pq + c];
        }
    }
    probs[row_of(b, h, i) + j] = s * p.scale + bias;
    dsc[row_of(b, h, i) + j] = dp;
}

@compute @workgroup_size(WG)
fn attn_bwd_softmax(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let b = wid.z;
    let h = wid.y;
    let i = gid.x;
    if i >= T {
        return;
    }
    let sb = row_of(b, h, i);
    // A query marked as masked whole (below −0.5): P_ij = 1/T over every key; dS = 0 when its mask filled the scores
    // (UNIFORM_FILLED, −1), the softmax's at that P when it was added to them (UNIFORM_ADDED, −2).
    let qm = mask[b * T + i];
    if qm < -0.5 {
        let inv = 1.0 / f32(T);
        var dot = 0.0;
        for (var j = 0u; j < T; j++) {
            var dp = 0.0;
            if qm < -1.5 {
                dp = dsc[sb + j];
                if DROPOUT != 0u {
                    dp = select(0.0, dp * p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, sb + j));
                }
            }
            dsc[sb + j] = dp;
            dot += dp * inv;
        }
        for (var j = 0u; j < T; j++) {
            var f = 1.0;
            if DROPOUT != 0u {
                f = select(0.0, p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, sb + j));
            }
            probs[sb + j] = f * inv;
            dsc[sb + j] = select(0.0, (dsc[sb + j] - dot) * inv * p.scale, qm < -1.5);
        }
        return;
    }
    // The max over the real keys.
    var mx = 0.0;
    var any = false;
    for (var j = 0u; j < T; j++) {
        if mask[b * T + j] > 0.5 {
            mx = select(probs[sb + j], max(mx, probs[sb + j]), any);
            any = true;
        }
    }
    if !any {
        for (var j = 0u; j < T; j++) {
            probs[sb + j] = 0.0;
            dsc[sb + j] = 0.0;
        }
        return;
    }
    var sum = 0.0;
    for (var j = 0u; j < T; j++) {
        let e = select(0.0, exp(probs[sb + j] - mx), mask[b * T + j] > 0.5);
        probs[sb + j] = e;
        sum += e;
    }
    // P_ij, dP_ij (dropped where the forward dropped) and Σ_j P_ij·dP_ij.
    var dot = 0.0;
    for (var j = 0u; j < T; j++) {
        var pj = 0.0;
        var dp = 0.0;
        if mask[b * T + j] > 0.5 {
            pj = probs[sb + j] / sum;
            dp = dsc[sb + j];
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
        if mask[b * T + j] > 0.5 {
            ds = probs[sb + j] * (dsc[sb + j] - dot) * p.scale;
            if DROPOUT != 0u {
                let f = select(0.0, p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, sb + j));
                probs[sb + j] = probs[sb + j] * f;
            }
        }
        dsc[sb + j] = ds;
    }
}

// The element of a head's (T, d) block that an invocation of attn_bwd_queries or attn_bwd_keys owns: row `row`
// (query i or key j), column c of head h = wid.y of sequence b = wid.z; `inside` is false past the block's end.
struct Cell {
    b: u32,
    h: u32,
    row: u32,
    c: u32,
    inside: bool,
}

fn cell_of(gid: vec3<u32>, wid: vec3<u32>) -> Cell {
    let d = p.head_dim;
    return Cell(wid.z, wid.y, gid.x / d, gid.x % d, gid.x < p.seq * d);
}

@compute @workgroup_size(WG)
fn attn_bwd_queries(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let q = cell_of(gid, wid);
    if !q.inside {
        return;
    }
    let sb = row_of(q.b, q.h, q.row);
    var acc = 0.0;
    for (var j = 0u; j < p.seq; j++) {
        acc += dsc[sb + j] * qkv[head_at(q.b, j, 1u, q.h) + q.c];
        if DISENTANGLED != 0u {
            acc += dsc[sb + j] * pos[pos_at(rel_row(q.row, j), 1u, q.h) + q.c];
        }
    }
    dqkv[head_at(q.b, q.row, 0u, q.h) + q.c] = acc;
}

@compute @workgroup_size(WG)
fn attn_bwd_keys(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let k = cell_of(gid, wid);
    if !k.inside {
        return;
    }
    var dk = 0.0;
    var dv = 0.0;
    // Every key, padding included: attn_bwd_softmax wrote every (i, j) of the scratch (0 for a padding key but in a
    // marked query's row).
    for (var i = 0u; i < p.seq; i++) {
        let s = row_of(k.b, k.h, i) + k.row;
        dk += dsc[s] * qkv[head_at(k.b, i, 0u, k.h) + k.c];
        if DISENTANGLED != 0u {
            dk += dsc[s] * pos[pos_at(rel_row(i, k.row), 0u, k.h) + k.c];
        }
        dv += probs[s] * dctx[(k.b * p.seq + i) * p.hidden + k.h * p.head_dim + k.c];
    }
    let kb = head_at(k.b, k.row, 1u, k.h);
    dqkv[kb + k.c] = dk;
    dqkv[kb + p.hidden + k.c] = dv;
}

@group(0) @binding(8) var<storage, read_write> dbias: array<f32>;

@compute @workgroup_size(WG)
fn attn_bwd_bias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let h = wid.y;
    let c = gid.x;
    let width = 2u * T - 1u;
    if c >= width {
        return;
    }
    // Offset j − i = c − (T − 1): queries i from max(0, T − 1 − c) to min(T, 2T − 1 − c).
    let i0 = select(0u, T - 1u - c, c < T - 1u);
    let i1 = min(T, width - c);
    var acc = 0.0;
    for (var b = 0u; b < p.batch; b++) {
        for (var i = i0; i < i1; i++) {
            acc += dsc[row_of(b, h, i) + i + c + 1u - T];
        }
    }
    dbias[h * width + c] = acc / p.scale;
}

@group(0) @binding(10) var<storage, read_write> dpos: array<f32>;

@group(0) @binding(11) var<storage, read_write> pos_part: array<f32>;

@compute @workgroup_size(WG)
fn attn_bwd_pos(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let o = wid.y;
    // Column n of the H = heads·d of q (and of k): head n / d, its column n % d (the last for an invocation past H,
    // which computes it again and writes nothing, so that every invocation runs the same loops).
    let n = min(gid.x, p.hidden - 1u);
    let h = n / p.head_dim;
    let c = n % p.head_dim;
    // Offset j − i = o − (T − 1): queries i from max(0, T − 1 − o) to min(T, 2T − 1 − o). Every bound here is the
    // workgroup's (no loop depends on the invocation), which a GPU emulated on the CPU needs to run the loop as one.
    let i0 = select(0u, T - 1u - o, o < T - 1u);
    let i1 = min(T, 2u * T - 1u - o);
    var dq = 0.0;
    var dk = 0.0;
    for (var b = 0u; b < p.batch; b++) {
        for (var i = i0; i < i1; i++) {
            let j = i + o + 1u - T;
            let g = dsc[row_of(b, h, i) + j];
            dq += g * qkv[head_at(b, j, 1u, h) + c];
            dk += g * qkv[head_at(b, i, 0u, h) + c];
        }
    }
    if gid.x < p.hidden {
        let at = o * 2u * p.hidden + n;
        pos_part[at] = dq;
        pos_part[at + p.hidden] = dk;
    }
}

// Offsets marked per chunk of attn_bwd_pos_rows (32 per word of pos_marks).
const POS_CHUNK: u32 = 1024u;
// Bit k of word w: offset base + 32·w + k reads the workgroup's row.
var<workgroup> pos_marks: array<u32, 32>;

@compute @workgroup_size(WG)
fn attn_bwd_pos_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>) {
    let r = wid.y;
    let width = 2u * p.seq - 1u;
    let live = gid.x < 2u * p.hidden;
    let col = min(gid.x, 2u * p.hidden - 1u); // every invocation walks the same offsets: the loops stay uniform
    var acc = 0.0;
    for (var base = 0u; base < width; base += POS_CHUNK) {
        let words = (min(width - base, POS_CHUNK) + 31u) / 32u;
        for (var w = lid.x; w < words; w += WG) {
            var bits = 0u;
            for (var k = 0u; k < 32u; k++) {
                let o = base + w * 32u + k;
                if o < width && u32(score_bias[o]) == r {
                    bits |= 1u << k;
                }
            }
            pos_marks[w] = bits;
        }
        for (var w = 0u; w < words; w++) {
            var bits = workgroupUniformLoad(&pos_marks[w]);
            while bits != 0u {
                let o = base + w * 32u + countTrailingZeros(bits);
                bits &= bits - 1u;
                acc += pos_part[o * 2u * p.hidden + col];
            }
        }
        workgroupBarrier();
    }
    if live {
        dpos[r * 3u * p.hidden + col] = acc;
        if col < p.hidden {
            dpos[r * 3u * p.hidden + 2u * p.hidden + col] = 0.0;
        }
    }
}
