#![no_main]
// See bertgpu::fuzzing::safetensors for what is fed and what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| bertgpu::fuzzing::safetensors(data));
