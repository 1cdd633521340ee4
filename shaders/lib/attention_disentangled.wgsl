// lib/attention_disentangled.wgsl: DeBERTa's disentangled score terms for the attention kernels, per-query
// (lib/attention.wgsl) and split (attention_split.wgsl), `Backend::attention_disentangled`. With the override DISENTANGLED = 1 the score of query i
// and key j in head h gets, besides q_i·k_j,
//   c2p = q_i · posK[r]   (the query's content against the key's relative position)
//   p2c = k_j · posQ[r]   (the key's content against the query's relative position)
// with r = rows[j − i + T − 1], the row of the projected relative table both read (transformers' c2p_pos and
// p2c_pos pick the same row: its buckets are odd in the offset). The whole score is scaled by p.scale = 1/√(3d)
// (the host sets it): q arrives pre-scaled, so q·(k + posK) needs nothing more and k·posQ is scaled here.
// Bindings: 4 rows (1, 2T − 1) f32 holding integers (the index table, where BIAS's table is; never both), 5 pos
// (R, 3H) f32: the table's rows through the layer's own q/k/v projection, [posQ | posK | unused], head h at columns
// h·d.. of each third, as qkv. DISENTANGLED = 0 (every other model) compiles the terms away; the host binds the
// mask in pos's place.
//
// The kernel that includes this file declares p, V, LANES and head_v() (lib/attention.wgsl's contract; the split
// kernel declares them for its vec4 reads).

override DISENTANGLED: u32 = 0u;

@group(0) @binding(5) var<storage, read> disentangled_pos: array<V>;

// The row of `disentangled_pos` that query i and key j read: its first V, for head h (posQ; posK is Hv further).
fn disentangled_base(h: u32, i: u32, j: u32) -> u32 {
    let r = u32(score_bias_table[p.seq - 1u - i + j]);
    let Hv = p.hidden / LANES;
    return r * 3u * Hv + h * head_v();
}
