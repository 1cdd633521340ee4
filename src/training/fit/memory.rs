//! What training holds on top of the model it was loaded from, stated before it starts: the trained copy of the
//! parameters (f32; a quantized base's frozen weights as stored), their gradients, AdamW's two moments, the activations a batch's forward keeps for its backward,
//! and the largest temporaries of a step. tests/training_memory.rs measures a step's allocations against it.

use crate::config::{BertConfig, Family, Norms, Positions};

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
    /// their gradient, the head's output and its gradient), and what the family adds to them (a gated feed-forward's
    /// `[up | gate]` twice as wide, a swapped up-projection weight, ModernBERT's pre-LN norms, DeBERTa's relative
    /// rows, ALBERT's summed gradients). Grows with the batch and the length.
    pub activations: u64,
    /// The update's temporaries: a parameter's new value and moments beside the old ones, the largest parameter's.
    /// It comes after the backward has freed the activations, so the two never add up.
    pub update: u64,
}

/// The step's small allocations besides the tensors counted: scalars, norms, index lists, the batch's targets and
/// per-call buffers (measured at under 0.3 MiB on all-MiniLM-L6-v2, tests/training_memory.rs).
const SMALL: u64 = 1 << 20;

/// What a family's encoder keeps and makes beyond BERT's layer, in f32 values, for micro-batches of `b` sequences
/// of `t` tokens (`rows` = b·t), as its forward and backward in src/training/encoder/ hold them.
struct LayerShape {
    /// The up-projection's output width: `i`, or `2i` for a gated feed-forward (`[up | gate]`: NomicBERT, GTE,
    /// JinaBERT, ModernBERT), whose u and du are twice as wide.
    up: u64,
    /// Per layer and forward, besides BERT's: JinaBERT's and ModernBERT's up-projection weight read with its halves
    /// swapped (`2i × h`, src/training/encoder/gated.rs); ModernBERT's attention-norm output (`rows × h`, counted on
    /// layer 0 too, which has none); DeBERTa's relative rows projected by the layer (`R × 3h`) and dropped out
    /// (`R × h`), R the rows of its relative table that the offsets of t tokens reach.
    kept_per_layer: u64,
    /// Per forward: ModernBERT's final norm's input and its local layers' mask; DeBERTa's relative rows gathered
    /// and LayerNorm'd (`2 · R × h`); ELECTRA's and ALBERT's projection input (`rows × E`).
    kept_once: u64,
    /// The backward's own temporaries beside BERT's: the rotary families' gradient of the turned qkv beside the
    /// unturned one (`rows × 3h`); DeBERTa's gradient of the projected rows (`R × 3h`), its kernel's per-sequence
    /// partial sums (`b · R × 2h`) and the query/key/value weight's gradient summed with the projection's; ALBERT's
    /// shared layer's gradients summed over its passes. A gradient summed into one already there (`params::put`)
    /// holds the new one and the sum beside the old: twice the largest matrix summed (`3h × h`, or the
    /// up-projection's).
    backward: u64,
}

impl LayerShape {
    /// `config`'s layer, for `b` sequences of `t` tokens.
    fn of(config: &BertConfig, b: u64, t: u64) -> LayerShape {
        let (h, i, e) = (config.hidden_size as u64, config.intermediate_size as u64, config.embedding_size as u64);
        let rows = b * t;
        let up = config.feed_forward.up_width(config.intermediate_size) as u64;
        let swapped = matches!(config.family, Family::JinaBert | Family::ModernBert) as u64 * 2 * i * h;
        let modern = (config.norms == Norms::Pre) as u64;
        // DeBERTa: R, the relative table's rows that the offsets of t tokens reach.
        let r = config.deberta.as_ref().and_then(|d| d.relative)
            .map_or(0, |d| (2 * t).saturating_sub(1).min(2 * d.span as u64));
        let rotary = matches!(config.positions, Positions::Rotary { .. }) as u64;
        let projected = config.family.has_embedding_projection(e as usize, h as usize) as u64 * rows * e;
        let shared = (config.family == Family::Albert) as u64 * 2 * (3 * h).max(up) * h;
        LayerShape {
            up,
            kept_per_layer: swapped + modern * rows * h + r * 4 * h,
            kept_once: modern * (rows * h + rows) + 2 * r * h + projected,
            backward: rotary * rows * 3 * h + r * 3 * h + b * r * 2 * h + (r > 0) as u64 * 2 * 3 * h * h + shared,
        }
    }
}

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
        let f = LayerShape::of(config, b, t);
        // Kept per layer: x, qkv (3h), ctx, pre1, h1, u (the up-projection's width), g (i), pre2, and the family's
        // own (`LayerShape`); then the embeddings' sum, the last hidden state and the mask, and the family's own.
        let per_layer = rows * (7 * h + f.up + i) + f.kept_per_layer;
        let saved = forwards as u64 * (l * per_layer + 2 * rows * h + rows + f.kept_once);
        // A layer's backward: the gradients of its activations alive at once (dg (i), and du and the GEMMs' working
        // copy beside it, each of the up-projection's width, as measured; the query/key/value's; three of the hidden
        // width), the family's own, and the attention's probabilities and their gradient; the head's output and its
        // gradient.
        let backward = rows * (i + 2 * f.up + 3 * h + 3 * h) + f.backward + 2 * b * heads * t * t
            + 2 * (head_rows * head_width) as u64;
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
