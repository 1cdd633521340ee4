#![no_main]
// See bertgpu::fuzzing::vocab_txt for what is fed and what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| bertgpu::fuzzing::vocab_txt(data));
