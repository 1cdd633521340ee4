#![no_main]
// See bertgpu::fuzzing::torch_bin for what is fed and what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| bertgpu::fuzzing::torch_bin(data));
