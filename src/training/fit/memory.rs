//! What training holds on top of the model it was loaded from, stated before it starts: the trained copy of the
//! parameters (f32; a quantized base's frozen weights as stored), their gradients, AdamW's two moments, the activations a batch's forward keeps for its backward,
//! and the largest temporaries of a step. tests/training_memory.rs measures a step's allocations against it.

use crate::config::BertConfig;

/// Bytes, each part f32 values × 4 (the frozen weights of a quantized base as stored); see [`TrainingMemory::total`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingMemory {
    /// The parameters being trained and those frozen: the training copy of the model, in f32 (the frozen linear
    /// weights of a quantized base under LoRA as stored: f16, Q8_0).
    pub parameters: u64,
    /// One gradient per trained parameter (summed over a step's micro-batches).
    pub gradients: u64,
    /// AdamW's first and second moments, per trained parameter.
    pub optimizer: u64,
    /// One micro-batch's forward and backward: what the forward keeps for the backward (per layer its input, the
    /// query/key/value projection, the attention's context, both residual sums, the first LayerNorm's output and the
    /// feed-forward's two activations; the embeddings' sum, the last hidden state, the mask), and the backward's
    /// largest temporaries (one layer's gradients of activations, the attention probabilities, computed again, and
    /// their gradient, the head's output and its gradient). Grows with the batch and the length.
    pub activations: u64,
    /// The update's temporaries: a parameter's new value and moments beside the old ones, the largest parameter's.
    /// It comes after the backward has freed the activations, so the two never add up.
    pub update: u64,
}

/// The step's small allocations besides the tensors counted: scalars, norms, index lists, the batch's targets and
/// per-call buffers (measured at under 0.3 MiB on all-MiniLM-L6-v2, tests/training_memory.rs).
const SMALL: u64 = 1 << 20;

impl TrainingMemory {
    /// The most a training step holds at once beyond the model as loaded for inference: the parameters, gradients
    /// and moments, and the larger of a micro-batch's activations and the update's temporaries.
    pub fn total(&self) -> u64 {
        self.parameters + self.gradients + self.optimizer + self.activations.max(self.update) + SMALL
    }

    /// `config`'s encoder with `params` (each `(values, bytes as stored, trained)`), for micro-batches of `b` sequences of `t` tokens
    /// going through it `forwards` times before their backward (embedding pairs: 2); `head_rows` × `head_width`: the
    /// head's widest output (e.g. the masked LM's selected rows × the vocabulary).
    pub fn of(config: &BertConfig, params: impl Iterator<Item = (usize, u64, bool)>, b: usize, t: usize, forwards: usize,
        head_rows: usize, head_width: usize) -> TrainingMemory {
        const F32: u64 = 4;
        let (mut all, mut trained, mut largest) = (0u64, 0u64, 0u64);
        for (n, stored, train) in params {
            all += stored;
            if train {
                trained += n as u64;
                largest = largest.max(n as u64);
            }
        }
        let (h, i, l) = (config.hidden_size as u64, config.intermediate_size as u64, config.num_hidden_layers as u64);
        let heads = config.num_attention_heads as u64;
        let (b, t) = (b as u64, t as u64);
        let rows = b * t;
        // Kept per layer: x, qkv (3h), ctx, pre1, h1, u (i), g (i), pre2; then the embeddings' sum, the last hidden
        // state and the mask.
        let saved = forwards as u64 * (l * rows * (7 * h + 2 * i) + 2 * rows * h + rows);
        // A layer's backward: the gradients of its activations alive at once (three of the feed-forward's width: du,
        // dg and the GEMMs' working copies beside them, as measured; the query/key/value's; three of the hidden
        // width) and the attention's probabilities and their gradient; the head's output and its gradient.
        let backward = rows * (3 * i + 3 * h + 3 * h) + 2 * b * heads * t * t + 2 * (head_rows * head_width) as u64;
        TrainingMemory {
            parameters: all,
            gradients: trained * F32,
            optimizer: 2 * trained * F32,
            activations: (saved + backward) * F32,
            update: 3 * largest * F32,
        }
    }

    /// Refuses a run whose step could not fit under `limit` ([`crate::backend::Backend::memory_limit`]), naming
    /// what it needs and what to lower.
    pub fn check_fits(&self, limit: Option<u64>) -> crate::Result<()> {
        match limit {
            Some(limit) if self.total() > limit => Err(crate::Error::Input(format!(
                "training would need {self} besides the model, more than the {:.0} MiB this backend can address: lower \
                 the batch size (gradient accumulation keeps the effective batch) or the maximum length, train fewer \
                 layers or LoRA adapters, or run on WebGPU",
                limit as f64 / 1048576.0
            ))),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for TrainingMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / 1048576.0;
        write!(
            f,
            "{:.0} MiB: parameters {:.0}, gradients {:.0}, AdamW moments {:.0}, then the larger of a batch's activations \
             {:.0} and the update's {:.0}",
            mib(self.total()),
            mib(self.parameters),
            mib(self.gradients),
            mib(self.optimizer),
            mib(self.activations),
            mib(self.update)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_beyond_the_backends_limit_is_refused_by_name() {
        let m = TrainingMemory { parameters: 1 << 30, gradients: 1 << 30, optimizer: 2 << 30, activations: 5 << 20, update: 3 << 20 };
        assert_eq!(m.total(), (4 << 30) + (5 << 20) + SMALL);
        let e = m.check_fits(Some(1 << 32)).unwrap_err().to_string();
        assert!(e.contains("4102 MiB") && e.contains("4096 MiB") && e.contains("batch size"), "{e}");
        m.check_fits(Some(5 << 30)).unwrap();
        m.check_fits(None).unwrap();
    }
}
