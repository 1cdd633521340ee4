// lib/attention_bias.wgsl: the additive score bias of the attention kernels (lib/attention.wgsl,
// attention_split.wgsl): `Backend::attention_biased`'s relative bias, `(heads, 2T − 1)` f32 at binding 4, the score
// of query i and key j in head h getting bias[h·(2T − 1) + j − i + T − 1] (MPNet's T5-style position buckets, read
// from its table on the host). The override BIAS = 1 reads it; BIAS = 0 (the default, every BERT) compiles the read
// away, and the host binds the mask in its place.

override BIAS: u32 = 0u;

@group(0) @binding(4) var<storage, read> score_bias_table: array<f32>;

// Where query i's row of head h starts, so that key j's bias is at bias_row(h, i) + j. i < T.
fn bias_row(h: u32, i: u32) -> u32 {
    return h * (2u * p.seq - 1u) + p.seq - 1u - i;
}

// The bias of key j (< T) of the query whose row starts at `row`; 0.0 without BIAS.
fn score_bias(row: u32, j: u32) -> f32 {
    if BIAS == 0u {
        return 0.0;
    }
    return score_bias_table[row + j];
}
