// lib/split_tile_subgroup.wgsl: lib/split_tile.wgsl's `split_tile` with the scores exchanged by subgroup shuffles,
// for adapters that have them (natively: Vulkan, Metal, DX12; wgpu's WebGPU backend does not expose them), in the
// `attention_split_sg` module (src/backend/gpu/params.rs, VARIANTS). No workgroup memory and no barrier for the
// scores (two barriers a tile, not three), and each lane takes the exp of its own key only, where the other way
// every lane of a query takes all dv of them.
//
// A query's dv lanes add their values and take their maximum by butterfly (`subgroupShuffleXor` with masks 1, 2, …
// below dv: every lane ends with the same bits, a + b being b + a), and lane c gets the weight of key c ^ x from
// lane c ^ x for each x below dv. So dv must be a power of two no larger than the subgroup, and a query's lanes
// invocations q·dv .. q·dv + dv − 1 of one subgroup; the host checks the first two (`GpuBackend` takes the
// workgroup kernel otherwise), and the last is the layout lib/reduce_subgroup.wgsl relies on, which the load-time
// check guards. Every invocation calls it (the shuffles need the whole subgroup): WG is a multiple of dv here, so
// every invocation owns a query.
//
// The kernel that includes this file declares vs, km, m, l, acc, p, NEG, DROPOUT and `tile_score` (the score of a
// query and a key of the tile, with its bias or disentangled terms).

fn split_tile(qi: u32, c: u32, dv: u32, owns: bool, j0: u32, drop_row: u32) {
    let s = tile_score(qi, c, dv, min(j0 + c, p.seq - 1u));
    let real = km[c] >= 0.5;
    var tm = select(NEG, s, real);
    for (var o = 1u; o < dv; o = o * 2u) {
        tm = max(tm, subgroupShuffleXor(tm, o));
    }
    // As lib/split_tile.wgsl: a = 1 where the max stays (a tile of padding alone changes nothing), and
    // exp(NEG − tm) underflows to 0 on the first real key.
    let mn = max(m, tm);
    let a = exp(m - mn);
    l = l * a;
    acc = acc * a;
    m = mn;
    let e = select(0.0, exp(s - m), real);
    var es = e;
    for (var o = 1u; o < dv; o = o * 2u) {
        es = es + subgroupShuffleXor(es, o);
    }
    l = l + es;
    // Dropout (DROPOUT = 1 only): as lib/attention.wgsl, l keeps every key.
    var w = e;
    if DROPOUT != 0u {
        w = select(0.0, e * p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, drop_row + j0 + c));
    }
    for (var x = 0u; x < dv; x = x + 1u) {
        acc = acc + subgroupShuffleXor(w, x) * vs[(c ^ x) * dv + c];
    }
}
