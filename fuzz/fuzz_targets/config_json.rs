#![no_main]
// See bertgpu::fuzzing::config_json for what is fed and what is checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| bertgpu::fuzzing::config_json(data));
