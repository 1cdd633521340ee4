// lib/workgroup_2d.wgsl: the two-dimensional workgroup shape of a tiled matmul (lib/matmul_tile.wgsl's tilings,
// train.wgsl's matmul_t), a tuning knob of each (src/backend/gpu/tuning.rs); the host clamps WG_X·WG_Y to the
// adapter's invocation limit.
override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;
