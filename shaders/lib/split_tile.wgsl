// lib/split_tile.wgsl: one tile of attention_split.wgsl's keys folded into each query's running softmax, the
// scores exchanged through workgroup memory: lane c writes its score of key c, and after a barrier every lane reads
// its query's dv scores, updates the running max and sum once, and adds the tile's weighted values to its own vec4.
// (lib/split_tile_subgroup.wgsl does the same with subgroup shuffles.) Every invocation of the workgroup calls it,
// once per tile, after the tile is staged.
//
// The kernel that includes this file declares qs, vs, km, m, l, acc, p, NEG, WG_MAX, DROPOUT and `tile_score`
// (the score of a query and a key of the tile, with its bias or disentangled terms).

var<workgroup> ss: array<f32, WG_MAX>;  // scores: ss[qi · dv + j]

fn split_tile(qi: u32, c: u32, dv: u32, owns: bool, j0: u32, drop_row: u32) {
    if owns {
        ss[qi * dv + c] = tile_score(qi, c, dv, min(j0 + c, p.seq - 1u));
    }
    workgroupBarrier();
    if owns {
        var tm = NEG;
        for (var j = 0u; j < dv; j = j + 1u) {
            if km[j] >= 0.5 {
                tm = max(tm, ss[qi * dv + j]);
            }
        }
        // A tile of padding alone changes nothing.
        if tm > NEG {
            if tm > m {
                // exp(NEG − tm) underflows to 0 on the first real key: nothing accumulated yet is kept.
                let a = exp(m - tm);
                l = l * a;
                acc = acc * a;
                m = tm;
            }
            for (var j = 0u; j < dv; j = j + 1u) {
                if km[j] >= 0.5 {
                    let e = exp(ss[qi * dv + j] - m);
                    l = l + e;
                    // Dropout (DROPOUT = 1 only): as lib/attention.wgsl, l keeps every key.
                    var w = e;
                    if DROPOUT != 0u {
                        w = select(0.0, e * p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, drop_row + j0 + j));
                    }
                    acc = acc + w * vs[j * dv + c];
                }
            }
        }
    }
}
