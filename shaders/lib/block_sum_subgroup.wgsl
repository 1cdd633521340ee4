// lib/block_sum_subgroup.wgsl: lib/block_sum.wgsl's `block_sum` with subgroup operations, for adapters that have
// them (natively), in the `_sg` matmul modules (src/backend/gpu/params.rs, VARIANTS). Each subgroup adds its
// partial blocks (`subgroupAdd`, eight vec4), its first invocation writes them to w_tile, and after one barrier the
// first 8 invocations add the subgroups' sums in order: one barrier where the tree takes log2(threads) + 1. It relies
// on the layout lib/reduce_subgroup.wgsl describes (subgroup s holds invocations s·n .. s·n + n − 1), which the
// load-time check guards.

fn block_sum(t: u32, threads: u32, blk: Block) -> vec4<f32> {
    let n = subgroupAdd(1u);  // invocations in this subgroup
    var s: array<vec4<f32>, 8>;
    for (var i = 0u; i < 4u; i = i + 1u) {
        s[i] = subgroupAdd(blk.acc[i]);
        s[4u + i] = subgroupAdd(blk.bcc[i]);
    }
    if t % n == 0u {
        for (var j = 0u; j < 8u; j = j + 1u) {
            w_tile[(t / n) * 8u + j] = s[j];
        }
    }
    workgroupBarrier();
    var total = vec4<f32>(0.0);
    if t < 8u {
        for (var g = 0u; g < (threads + n - 1u) / n; g = g + 1u) {
            total = total + w_tile[g * 8u + t];
        }
    }
    return total;
}
