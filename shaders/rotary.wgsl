// rotary.wgsl: rotary position embeddings on the queries and keys of qkv (B*T, 3H), the `rotate_half` form of
// transformers' `apply_rotary_pos_emb`: in each head of size d, dimension i < d/2 of token t becomes
// x_i·cos − x_{i+d/2}·sin and dimension i + d/2 becomes x_{i+d/2}·cos + x_i·sin. The values (the last H columns) are
// copied. The CPU twin: src/backend/cpu/rotary.rs `rotary`; the math: `Backend::rotary` in src/backend/mod.rs.
//
// Bindings (group 0):
//   0  p     uniform Params { rows = B*T, seq = T, heads, head_dim = d }
//   1  x     (B*T, 3H) f32
//   2  rope  (P ≥ T, d) f32   row t: cos(t·f_0 … t·f_{d/2−1}), then sin(…), computed on the host in f32 as PyTorch
//   3  y     (B*T, 3H) f32
//
// One invocation per element of y over a 2-D grid (linearised) so any size fits.

struct Params {
    rows: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> rope: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn rotary(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    let h = p.heads * p.head_dim;
    if i >= p.rows * 3u * h {
        return;
    }
    let c = i % (3u * h);
    if c >= 2u * h {
        y[i] = x[i];
        return;
    }
    let half = p.head_dim / 2u;
    let j = c % p.head_dim;
    let k = j % half;
    let t = (i / (3u * h)) % p.seq;
    let cos_a = rope[t * p.head_dim + k];
    let sin_a = rope[t * p.head_dim + half + k];
    if j < half {
        y[i] = x[i] * cos_a - x[i + half] * sin_a;
    } else {
        y[i] = x[i] * cos_a + x[i - half] * sin_a;
    }
}
