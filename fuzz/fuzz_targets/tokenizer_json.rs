#![no_main]
// See bertgpu::fuzzing::tokenizer_json for what is fed and what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| bertgpu::fuzzing::tokenizer_json(data));
