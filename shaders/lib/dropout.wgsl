// lib/dropout.wgsl: the dropout mask of `Dropout` in src/backend/mod.rs (its CPU twin: `Dropout::keeps`), in the same
// 32-bit integer operations, so both sides drop the same elements bit for bit. The host passes the site's key
// (`Dropout::key`: pcg(pcg(seed) ^ stream)), its threshold (round(p·2³²)) and its scale (1/(1 − p) in f32).

// PCG's RXS-M-XS output permutation of one LCG step, as a hash (Jarzynski & Olano 2020). u32 arithmetic wraps.
fn pcg_hash(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// Whether element i of the site keyed `key` is kept.
fn dropout_keeps(key: u32, threshold: u32, i: u32) -> bool {
    return pcg_hash(pcg_hash(i + key) ^ key) >= threshold;
}
