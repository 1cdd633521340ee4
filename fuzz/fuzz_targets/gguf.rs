#![no_main]
// See bertgpu::fuzzing::gguf for what is fed and what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| bertgpu::fuzzing::gguf(data));
