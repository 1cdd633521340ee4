// lib/reduce.wgsl: the sum of one value per invocation over a workgroup, by a tree reduction in workgroup memory
// (1 KiB). Every invocation of the workgroup must call it (it has barriers), the same number of times.
//
// The kernel that includes this file declares:
//   override WG: u32                  invocations per workgroup, a power of two ≤ 256

var<workgroup> red: array<f32, 256>;

// Sum of `v` over the workgroup (tree reduction; WG is a power of two).
fn wg_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if lid < s {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}
