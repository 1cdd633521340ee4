//! sentence-transformers' modules after the encoder ([`crate::sentence`]), on the backend: Pooling in each of its
//! modes, then the Dense layers, so that only the final `(B, out)` vectors are read back; Normalize, and the
//! truncation to fewer dimensions, on those vectors on the host.

use crate::backend::{Activation, Backend, TokenPool};
use crate::sentence::{Module, Pooling, SentenceConfig, DENSE_PREFIX};
use crate::weights::Weights;
use crate::{Error, Result};


/// One Dense module on the backend.
pub struct Dense<B: Backend> {
    weight: B::Tensor, // (out, in)
    bias: Option<B::Tensor>,
    activation: Activation,
}

/// The modules of a sentence-transformers model, ready to run.
pub struct SentenceHead<B: Backend> {
    pub config: SentenceConfig,
    dense: Vec<Dense<B>>,
}

impl<B: Backend> SentenceHead<B> {
    /// The modules `config` lists, their Dense weights from `w` (the model's weights, where the loader put them).
    pub fn load(config: &SentenceConfig, w: &Weights, hidden: usize, backend: &B) -> Result<SentenceHead<B>> {
        config.check(hidden)?;
        let mut dense = Vec::new();
        for m in config.dense() {
            let Module::Dense { path, in_features, out_features, bias, activation } = m else { continue };
            let at = w.root().pp(&format!("{DENSE_PREFIX}{path}.linear"));
            let missing = |name: &str| {
                Error::Weights(format!(
                    "the Dense module `{path}` has no `{name}`: its {path}/model.safetensors is missing or holds other \
                     tensors"
                ))
            };
            if !at.contains("weight") {
                return Err(missing("linear.weight"));
            }
            let weight = backend.upload_shared(&at.get_shared("weight", &[*out_features, *in_features])?)?;
            let bias = match bias {
                true if !at.contains("bias") => return Err(missing("linear.bias")),
                true => Some(backend.upload(at.get("bias", &[*out_features])?)?),
                false => None,
            };
            dense.push(Dense { weight, bias, activation: *activation });
        }
        Ok(SentenceHead { config: config.clone(), dense })
    }

    /// The Dense layers on pooled vectors `(B, in)` → `(B, out)`.
    pub fn dense(&self, backend: &B, pooled: B::Tensor) -> Result<B::Tensor> {
        let mut x = pooled;
        for d in &self.dense {
            x = backend.linear(&x, &d.weight, d.bias.as_ref(), d.activation)?;
        }
        Ok(x)
    }
}

/// Pooling of the encoder's output `hidden` `(B*T, H)` by `mode` over the tokens `mask` `(B, T)` (on the host:
/// `mask_rows`, 1 for a token pooled, 0 for padding or a prompt token left out) → `(B, H)`, on the backend.
pub fn pool<B: Backend>(backend: &B, hidden: &B::Tensor, mask: &B::Tensor, mask_rows: &[f32], batch: usize, seq: usize,
    mode: Pooling) -> Result<B::Tensor> {
    let token = |mode| backend.pool_tokens(hidden, mask, batch, seq, mode);
    match mode {
        Pooling::Mean => token(TokenPool::Mean),
        Pooling::Max => token(TokenPool::Max),
        Pooling::MeanSqrtLen => token(TokenPool::MeanSqrtLen),
        Pooling::WeightedMean => token(TokenPool::WeightedMean),
        Pooling::Cls | Pooling::LastToken => {
            // The first (last) token pooled, as sentence-transformers finds it: the first (last) 1 of the mask; a
            // row with none takes its first (last) position.
            let rows: Vec<u32> = (0..batch)
                .map(|b| {
                    let row = &mask_rows[b * seq..(b + 1) * seq];
                    let t = if mode == Pooling::Cls {
                        row.iter().position(|&m| m != 0.0).unwrap_or(0)
                    } else {
                        row.iter().rposition(|&m| m != 0.0).unwrap_or(seq - 1)
                    };
                    (b * seq + t) as u32
                })
                .collect();
            backend.gather_rows(hidden, &rows)
        }
    }
}

/// The host's last steps on one vector: the first `dimensions` values (Matryoshka truncation) and, where `normalize`,
/// the L2 normalisation, after the truncation so that a truncated vector is a unit vector again.
pub fn finish(mut v: Vec<f32>, dimensions: Option<usize>, normalize: bool) -> Vec<f32> {
    if let Some(d) = dimensions {
        v.truncate(d);
    }
    if normalize {
        super::l2_normalize(&mut v);
    }
    v
}
