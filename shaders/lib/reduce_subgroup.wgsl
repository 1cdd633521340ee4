// lib/reduce_subgroup.wgsl: lib/reduce.wgsl's `wg_sum` with subgroup operations, for adapters that have them
// (natively: Vulkan, Metal, DX12; wgpu's WebGPU backend does not expose them). A kernel gets this piece in place of
// lib/reduce.wgsl when its module is composed as a `_sg` variant (src/backend/gpu/params.rs, VARIANTS).
//
// Each subgroup adds its invocations' values (`subgroupAdd`), its first invocation writes the sum to workgroup
// memory, and after one barrier every invocation adds the subgroups' sums in order: two barriers a sum, where the
// tree takes log2(WG) + 2.
//
// It relies on what drivers do for a one-dimensional workgroup: subgroup s holds invocations s·n .. s·n + n − 1 of
// local_invocation_index (n the subgroup size, a power of two; a workgroup smaller than a subgroup is one partial
// subgroup of WG invocations). WGSL does not promise that layout. A driver that lays subgroups out otherwise gives
// wrong sums, which the load-time check catches: it runs on every tuning the calibration chooses
// (`Engine::set_tuning`), and the tree reduction stays.
//
// The kernel that includes this file declares:
//   override WG: u32                  invocations per workgroup, a power of two ≤ 256

var<workgroup> red: array<f32, 256>;

// Sum of `v` over the workgroup; every invocation of the workgroup calls it, the same number of times.
fn wg_sum(lid: u32, v: f32) -> f32 {
    let s = subgroupAdd(v);
    let n = subgroupAdd(1u);  // invocations in this subgroup
    if lid % n == 0u {
        red[lid / n] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < (WG + n - 1u) / n; i = i + 1u) {
        total = total + red[i];
    }
    workgroupBarrier();
    return total;
}
