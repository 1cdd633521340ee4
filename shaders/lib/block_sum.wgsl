// lib/block_sum.wgsl: the sum of the workgroup's partial 4×8 blocks, for `tile_reduce` (lib/matmul_tile.wgsl),
// by a tree in w_tile (8 vec4 per invocation). lib/block_sum_subgroup.wgsl makes the same sum with subgroup
// operations.

// Invocation t of `threads` (a power of two ≤ 64; every invocation calls it) gives its partial block; invocations
// t < 8 get vec4 t of the whole block's sum (rows t & 3, columns 4·(t >> 2) ..), the others zeros.
fn block_sum(t: u32, threads: u32, blk: Block) -> vec4<f32> {
    for (var i = 0u; i < 4u; i = i + 1u) {
        w_tile[t * 8u + i] = blk.acc[i];
        w_tile[t * 8u + 4u + i] = blk.bcc[i];
    }
    workgroupBarrier();
    for (var half = threads / 2u; half > 0u; half = half / 2u) {
        if t < half {
            for (var j = 0u; j < 8u; j = j + 1u) {
                w_tile[t * 8u + j] = w_tile[t * 8u + j] + w_tile[(t + half) * 8u + j];
            }
        }
        workgroupBarrier();
    }
    return select(vec4<f32>(0.0), w_tile[min(t, 7u)], t < 8u);
}
