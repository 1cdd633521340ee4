//! WordPiece tokenization through the `tokenizers` crate: single texts and pairs, truncation, offsets, batches.

/// A padded batch of token sequences, row-major `(b, t)`, padding on the right.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub input_ids: Vec<u32>,      // (b, t)
    pub token_type_ids: Vec<u32>, // (b, t)
    pub attention_mask: Vec<u32>, // (b, t): 1 real token, 0 padding
    pub b: usize,
    pub t: usize,
}
