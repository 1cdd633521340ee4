// lib/quant.wgsl: how weights are stored in an `array<u32>` buffer and how to decode them, without `shader-f16`.
//
// Dtype codes (`Dtype::shader_code` in src/dtype.rs): 0 f32 (one word per value), 1 f16 (two per word, low half
// first), 2 Q8_0, 3 Q4_0. The quantized ones are llama.cpp's blocks of 32 values along a row, back to back, row
// after row (block b of row r starts at byte (r·K/32 + b)·BYTES for rows of K values):
//   Q8_0: f16 scale d, then 32 × i8 q; value j is q[j]·d (34 bytes).
//   Q4_0: f16 scale d, then 16 bytes whose low nibbles are values 0..15 and high nibbles values 16..31;
//         value j is (q[j] − 8)·d (18 bytes).
// 34 and 18 are not multiples of 4, so half the blocks start mid-word. Storage arrays cannot be passed to
// functions, so these take the words a kernel has loaded from its own buffer, and say which words to load.
// f16 is decoded with `unpack2x16float`, bytes and nibbles with shifts; everything after is f32.

// Bytes per block: 34 (Q8_0), 18 (Q4_0).
fn block_bytes(dt: u32) -> u32 {
    return select(18u, 34u, dt == 2u);
}

// Byte offset, from the block's start, of the byte holding value j (0..31) of a Q8_0 or Q4_0 block.
fn quant_byte(dt: u32, j: u32) -> u32 {
    return 2u + select(j & 15u, j, dt == 2u);
}

// Which nibble of that byte holds value j (0..31) of a Q4_0 block: shift 0 (j < 16) or 4 (bit 4 of j set).
fn nibble_shift(j: u32) -> u32 {
    return (j & 16u) >> 2u;
}

// The f16 at (even) byte offset `o` of a buffer, given the word holding it.
fn half_in(w: u32, o: u32) -> f32 {
    let v = unpack2x16float(w);
    return select(v.x, v.y, (o & 2u) != 0u);
}

// One value of a Q8_0 or Q4_0 block with scale d: the one at byte offset `o` (nibble shift `s` for Q4_0), given
// the word holding that byte.
fn quant_value(dt: u32, w: u32, o: u32, s: u32, d: f32) -> f32 {
    let b = (o & 3u) * 8u;
    if dt == 2u {
        return f32(bitcast<i32>(w << (24u - b)) >> 24u) * d;
    }
    return (f32((w >> (b + s)) & 0xFu) - 8.0) * d;
}

// Four consecutive values of a Q8_0 or Q4_0 block with scale d, from the four bytes in word `u` (lowest first;
// nibble shift `s` for Q4_0).
fn quant_vec4(dt: u32, u: u32, s: u32, d: f32) -> vec4<f32> {
    if dt == 2u {
        let v = bitcast<vec4<i32>>(vec4<u32>(u << 24u, u << 16u, u << 8u, u)) >> vec4<u32>(24u);
        return vec4<f32>(v) * d;
    }
    let q = (vec4<u32>(u, u >> 8u, u >> 16u, u >> 24u) >> vec4<u32>(s)) & vec4<u32>(0xFu);
    return (vec4<f32>(q) - 8.0) * d;
}

// Element `i` of row `row` of a (rows, k) table in dtype `dt` lives in two words of its buffer: the one holding
// its block's f16 scale (x) and the one holding the value (y). Load both and pass them to `elem_decode`.
fn elem_words(dt: u32, k: u32, row: u32, i: u32) -> vec2<u32> {
    switch dt {
        case 0u: { let e = row * k + i; return vec2<u32>(e, e); }
        case 1u: { let e = (row * k + i) >> 1u; return vec2<u32>(e, e); }
        default: {
            let ob = (row * (k / 32u) + i / 32u) * block_bytes(dt);
            return vec2<u32>(ob >> 2u, (ob + quant_byte(dt, i % 32u)) >> 2u);
        }
    }
}

// Element `i` of row `row` of a (rows, k) table in dtype `dt`, from the words `elem_words` named: ws (scale), wv.
fn elem_decode(dt: u32, k: u32, row: u32, i: u32, ws: u32, wv: u32) -> f32 {
    switch dt {
        case 0u: { return bitcast<f32>(wv); }
        case 1u: { return half_in(wv, (row * k + i) * 2u); }
        default: {
            let ob = (row * (k / 32u) + i / 32u) * block_bytes(dt);
            let j = i % 32u;
            return quant_value(dt, wv, ob + quant_byte(dt, j), nibble_shift(j), half_in(ws, ob));
        }
    }
}
