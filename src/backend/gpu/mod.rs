//! The GPU backend: `wgpu` + the WGSL kernels in `shaders/`.
