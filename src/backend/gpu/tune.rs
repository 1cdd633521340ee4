//! Choosing the kernels on the adapter at hand. The defaults of [`Tuning`] are the fastest on CPU adapters
//! (lavapipe, SwiftShader); a real GPU wants other tilings. The variants worth timing are listed here, and the
//! calibration times them on the model's own shapes and keeps the fastest.

use super::{Gpu, Tuning};

/// Matmul workgroup shapes of the direct kernel worth timing (the default first).
const DIRECT_WG: [(u32, u32); 4] = [(8, 8), (16, 16), (16, 4), (32, 4)];
/// Workgroup shapes of the tiled kernel (≤ 16 × 16: its staging arrays).
const TILED_WG: [(u32, u32); 4] = [(8, 8), (16, 8), (8, 16), (16, 16)];

/// Every matmul variant the calibration may choose on `gpu` (the default first), each as a full [`Tuning`] with
/// the other knobs at their defaults; variants the adapter cannot run (workgroup too large, too little workgroup
/// memory for the tiled kernel) are left out.
pub fn matmul_candidates(gpu: &Gpu) -> Vec<Tuning> {
    let mut out: Vec<Tuning> = Vec::new();
    let wanted = DIRECT_WG.iter().map(|&wg| (wg, false)).chain(TILED_WG.iter().map(|&wg| (wg, true)));
    for (matmul_wg, matmul_tiled) in wanted {
        let t = Tuning { matmul_wg, matmul_tiled, ..Tuning::default() };
        if t.clamped(&gpu.limits) == t && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}
