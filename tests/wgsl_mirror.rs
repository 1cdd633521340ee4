//! tests/browser/wgsl.mjs mirrors src/backend/gpu/wgsl.rs's include step for the browser tests that compile kernels
//! themselves (quant-kernels.test.mjs): both must give every kernel the same text, or those tests would check WGSL
//! the package never runs. Runs the mirror with Node (which the test command needs anyway).

use std::process::Command;

use bertgpu::backend::gpu::params::SHADERS;
use bertgpu::backend::gpu::wgsl;

#[test]
fn the_javascript_include_step_composes_every_kernel_as_rust_does() {
    let root = env!("CARGO_MANIFEST_DIR");
    assert!(SHADERS.len() >= 9, "every kernel is listed");
    let files: Vec<&str> = SHADERS.iter().map(|s| s.1).collect();
    // One Node process composes them all and prints them as a JSON array, in order.
    let script = format!(
        "import('{root}/tests/browser/wgsl.mjs').then((m) => process.stdout.write(JSON.stringify({files:?}.map((f) => m.composeWgsl(f).text))))"
    );
    let out = Command::new("node").args(["--input-type=module", "-e", &script]).output().expect("node runs");
    assert!(out.status.success(), "node: {}", String::from_utf8_lossy(&out.stderr));
    let js: Vec<String> = serde_json::from_slice(&out.stdout).expect("a JSON array of texts");
    assert_eq!(js.len(), files.len(), "one text per kernel");
    for (file, js_text) in files.iter().zip(&js) {
        let rust = wgsl::compose(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(rust.text.contains("fn "), "{file}: composed text is WGSL");
        assert_eq!(js_text, &rust.text, "shaders/{file}: tests/browser/wgsl.mjs and wgsl.rs compose differently");
    }
}
