// lib/packed_weight.wgsl: a weight (N, K) read from its raw words in dtype WDT (f16, Q8_0, Q4_0: the layouts of
// lib/quant.wgsl), four values along K at a time, decoded in registers and never expanded in memory. The one
// decoding of the kernels that read a stored weight: matmul_packed.wgsl (the forward's matmul, whose tilings in
// lib/matmul_tile.wgsl call w_row, w_vec and w_scale) and weight_grad.wgsl (dy · W through a frozen weight, and the
// weight read back), so the gradient and the read-back see exactly the values the forward multiplied by.
//
// Left to the kernel that includes it:
//   wq       array<u32> storage binding  the weight's words; the host pads the buffer with a spare word for the
//                                         reads that straddle the last one (word_at)
//   WDT      u32 (override)              the weight's dtype code: 1 f16, 2 Q8_0, 3 Q4_0 (an f32 weight needs no
//                                         decoding: the kernels read it themselves)
//   p.k      u32                         K, the row length: K % 4 == 0 (f16) or K % 32 == 0 (Q8_0, Q4_0)

#include "lib/quant.wgsl"

// The 4 bytes at byte offset `o` (even) of wq, as one little-endian word: the word itself when `o` is 4-aligned,
// else the high half of one word and the low half of the next. (w << 1) << (31 − sh) is w << 16 for sh = 16 and 0
// for sh = 0 without a shift by 32 (which WGSL takes modulo 32).
fn word_at(o: u32) -> u32 {
    let i = o >> 2u;
    let sh = (o & 2u) * 8u;
    return (wq[i] >> sh) | ((wq[i + 1u] << 1u) << (31u - sh));
}

// Word index (f16) or byte offset (Q8_0, Q4_0) where weight row `c` starts.
fn w_row(c: u32) -> u32 {
    if WDT == 1u {
        return c * (p.k / 2u);
    }
    return c * (p.k / 32u) * block_bytes(WDT);
}

// Weights k = 4·kk .. 4·kk + 3 of the row starting at `row`, decoded; `d` is the scale of the block holding them
// (w_scale; unused for f16).
//   f16:          words row + 2kk and row + 2kk + 1, two halves each.
//   Q8_0 / Q4_0:  values 4i..4i+3 (i = kk % 8) of block kk / 8, which lie in 4 consecutive bytes.
fn w_vec(row: u32, kk: u32, d: f32) -> vec4<f32> {
    if WDT == 1u {
        let i = row + 2u * kk;
        return vec4<f32>(unpack2x16float(wq[i]), unpack2x16float(wq[i + 1u]));
    }
    let j = 4u * (kk & 7u);
    return quant_vec4(WDT, word_at(row + (kk >> 3u) * block_bytes(WDT) + quant_byte(WDT, j)), nibble_shift(j), d);
}

// The scale of the block holding weight k = 4·kk of the row starting at `row` (Q8_0, Q4_0).
fn w_scale(row: u32, kk: u32) -> f32 {
    let o = row + (kk >> 3u) * block_bytes(WDT);
    return half_in(wq[o >> 2u], o);
}
