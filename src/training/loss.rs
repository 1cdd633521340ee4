//! What the losses of every objective share: cross-entropy over the rows that have a target, the label that has
//! none, and the predicted class.

/// The label of a token that no loss is computed for (transformers' `ignore_index`).
pub const IGNORE: i64 = -100;

/// Mean softmax cross-entropy over the rows of `logits` (`classes` per row) whose target is `Some`, in f64.
pub fn mean_cross_entropy(logits: &[f32], classes: usize, targets: impl Iterator<Item = Option<u32>>) -> f32 {
    let (mut total, mut n) = (0f64, 0usize);
    for (row, y) in logits.chunks_exact(classes).zip(targets) {
        let Some(y) = y else { continue };
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = row.iter().map(|&z| (z as f64 - mx).exp()).sum::<f64>().ln() + mx;
        total += lse - row[y as usize] as f64;
        n += 1;
    }
    (total / n.max(1) as f64) as f32
}

/// Index of the largest value (the first on ties).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}
