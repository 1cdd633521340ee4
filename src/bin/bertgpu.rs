//! The `bertgpu` command line: a thin shim over `bertgpu::tasks`.
fn main() {}
