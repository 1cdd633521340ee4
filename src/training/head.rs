//! Training a classification head on frozen encoder features: the head, its forward and backward pass on the
//! backend, its training steps (through [`super::optim::AdamW`]), and the head's safetensors file.
//!
//! # The math
//!
//! Input: pooled features `X (B, H)` (mean over real tokens by default, or the `[CLS]` row; recorded in the file),
//! integer labels `y (B)` in `0..C`.
//!
//! Linear head (the default), the `classifier` of `BertForSequenceClassification` minus the pooler:
//! ```text
//! Z = X·Wᵀ + b                 W (C, H), b (C), Z (B, C)
//! ```
//! With one hidden layer (`hidden: Some(D)`, activation σ = ReLU or GELU), the two linears of
//! `RobertaClassificationHead` (`dense`, `out_proj`):
//! ```text
//! A = X·W1ᵀ + b1,  Hd = σ(A)      W1 (D, H), b1 (D), A and Hd (B, D)
//! Z = Hd·W2ᵀ + b2                 W2 (C, D), b2 (C)
//! ```
//! Loss: softmax cross-entropy, mean over the batch (`torch.nn.functional.cross_entropy`, reduction "mean"):
//! ```text
//! L = −(1/B) Σ_i log softmax(Z_i)[y_i]
//! ```
//! Backward. With P = softmax(Z) row-wise and Y the one-hot labels:
//! ```text
//! dZ  = (P − Y) / B                          (B, C)   Backend::softmax_xent_grad
//! dW  = dZᵀ · X                              (C, H)   Backend::matmul(dZ, trans_a, X)
//! db  = Σ_i dZ_i = 1ᵀ · dZ                   (C)      Backend::matmul(ones (B, 1), trans_a, dZ)
//! ```
//! and through the hidden layer (input of the last linear is Hd):
//! ```text
//! dW2 = dZᵀ · Hd,  db2 = 1ᵀ · dZ
//! dHd = dZ · W2                              (B, D)   Backend::matmul(dZ, W2)
//! dA  = dHd ⊙ σ'(A)                          (B, D)   Backend::activation_grad
//! dW1 = dAᵀ · X,   db1 = 1ᵀ · dA
//! ```
//! (dZ_ij = ∂L/∂Z_ij: ∂(−log P_iy)/∂Z_ij = P_ij − [j = y], and the mean contributes 1/B.)
//!
//! Optimiser: AdamW exactly as `torch.optim.AdamW` (defaults β = (0.9, 0.999), eps = 1e-8), applied to every
//! parameter including biases, as `AdamW(model.parameters())` does; see [`AdamWStep`] for the update and
//! `tests/golden/train.py` for the PyTorch check.
//!
//! Initialisation: as `nn.Linear` (`kaiming_uniform_(a=√5)` on the weight, which is `U(−1/√fan_in, 1/√fan_in)`,
//! and the same bound for the bias), drawn from [`SplitMix64`] so a seed gives the same head on every platform.

use std::collections::HashMap;

use super::loss::argmax;
use super::rng::SplitMix64;
use super::optim::{AdamW, AdamWOptions};
use crate::backend::{Activation, AdamWStep, Backend};
use crate::heads::Pooling;
use crate::{Error, Result};

/// The shape of a head: its input size, optional hidden layer, labels and the pooling its features come from.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadSpec {
    /// Features per example (the encoder's hidden size).
    pub input_size: usize,
    /// One hidden layer of this width and activation, or none (a single linear layer).
    pub hidden: Option<(usize, Activation)>,
    pub labels: Vec<String>,
    pub pooling: Pooling,
}

impl HeadSpec {
    /// `(rows, cols)` of each parameter, in [`TrainedHead::params`] order.
    pub fn param_shapes(&self) -> Vec<(usize, usize)> {
        let c = self.labels.len();
        match self.hidden {
            None => vec![(c, self.input_size), (1, c)],
            Some((d, _)) => vec![(d, self.input_size), (1, d), (c, d), (1, c)],
        }
    }

    /// The Hugging Face names of the parameters, in [`TrainedHead::params`] order.
    pub fn param_names(&self) -> &'static [&'static str] {
        match self.hidden {
            None => &["classifier.weight", "classifier.bias"],
            Some(_) => &[
                "classifier.dense.weight",
                "classifier.dense.bias",
                "classifier.out_proj.weight",
                "classifier.out_proj.bias",
            ],
        }
    }

    /// Parameters drawn as `nn.Linear` initialises them: `U(−1/√fan_in, 1/√fan_in)` for weight and bias.
    pub fn init(&self, rng: &mut SplitMix64) -> Vec<Vec<f32>> {
        let shapes = self.param_shapes();
        let mut out = Vec::new();
        for pair in shapes.chunks(2) {
            let fan_in = pair[0].1;
            let bound = 1.0 / (fan_in as f64).sqrt();
            for &(r, c) in pair {
                out.push((0..r * c).map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32).collect());
            }
        }
        out
    }
}

/// A classification head on pooled features, live on backend `B`, with a host copy of its parameters (for export).
pub struct TrainedHead<B: Backend> {
    pub spec: HeadSpec,
    /// `[W (C, H), b (1, C)]`, or `[W1 (D, H), b1 (1, D), W2 (C, D), b2 (1, C)]` with a hidden layer.
    pub params: Vec<B::Tensor>,
    /// The same values on the host, row-major.
    pub host: Vec<Vec<f32>>,
}

/// What the forward pass keeps for the backward pass.
pub struct Activations<T> {
    /// Pre-activation `A (B, D)` and output `Hd (B, D)` of the hidden layer, if any.
    pub hidden: Option<(T, T)>,
    pub logits: T, // (B, C)
}

/// `Z` for features `x (B, H)`, and what the backward pass needs.
pub fn forward<B: Backend>(be: &B, spec: &HeadSpec, params: &[B::Tensor], x: &B::Tensor) -> Result<Activations<B::Tensor>> {
    match spec.hidden {
        None => Ok(Activations { hidden: None, logits: be.linear(x, &params[0], Some(&params[1]), Activation::None)? }),
        Some((_, act)) => {
            // The linear is run twice (without and with its activation) rather than adding an activation-only op:
            // the head is tiny and the backward needs A as well as σ(A).
            let a = be.linear(x, &params[0], Some(&params[1]), Activation::None)?; // (B, D)
            let h = be.linear(x, &params[0], Some(&params[1]), act)?; // (B, D)
            let logits = be.linear(&h, &params[2], Some(&params[3]), Activation::None)?; // (B, C)
            Ok(Activations { hidden: Some((a, h)), logits })
        }
    }
}

/// The gradients of the mean cross-entropy, in parameter order (see the module comment for the formulas).
pub fn backward<B: Backend>(be: &B, spec: &HeadSpec, params: &[B::Tensor], x: &B::Tensor, act: &Activations<B::Tensor>,
    labels: &[u32]) -> Result<Vec<B::Tensor>> {
    let (b, _) = be.dims(x);
    let ones = be.input(&vec![1.0; b], b, 1)?; // (B, 1)
    let dz = be.softmax_xent_grad(&act.logits, labels)?; // (B, C)
    match (&spec.hidden, &act.hidden) {
        (None, _) => Ok(vec![
            be.matmul(&dz, true, x, false)?,     // (C, H)
            be.matmul(&ones, true, &dz, false)?, // (1, C)
        ]),
        (Some((_, f)), Some((a, h))) => {
            let dw2 = be.matmul(&dz, true, h, false)?; // (C, D)
            let db2 = be.matmul(&ones, true, &dz, false)?; // (1, C)
            let dh = be.matmul(&dz, false, &params[2], false)?; // (B, D)
            let da = be.activation_grad(&dh, a, *f)?; // (B, D)
            let dw1 = be.matmul(&da, true, x, false)?; // (D, H)
            let db1 = be.matmul(&ones, true, &da, false)?; // (1, D)
            Ok(vec![dw1, db1, dw2, db2])
        }
        (Some(_), None) => Err(Error::Input("backward: the forward pass kept no hidden activations".into())),
    }
}

/// The parameters being trained and AdamW's state, all on the backend.
pub struct Trainer<B: Backend> {
    pub spec: HeadSpec,
    pub params: Vec<B::Tensor>,
    /// AdamW's moments and step count.
    adamw: AdamW<B::Tensor>,
    pub opt: AdamWOptions,
    /// Gradients summed over the micro-batches of the step being accumulated, and their count.
    pending: Option<(Vec<B::Tensor>, usize)>,
}

impl<B: Backend> Trainer<B> {
    /// Starts from `init` (host values in parameter order) with zero moments.
    pub fn new(be: &B, spec: HeadSpec, init: &[Vec<f32>], opt: AdamWOptions) -> Result<Trainer<B>> {
        let shapes = spec.param_shapes();
        if init.len() != shapes.len() || init.iter().zip(&shapes).any(|(v, &(r, c))| v.len() != r * c) {
            return Err(Error::Input("initial head parameters do not match the head's shape".into()));
        }
        let params = init.iter().zip(&shapes).map(|(vals, &(r, c))| be.input(vals, r, c)).collect::<Result<_>>()?;
        let adamw = AdamW::zeroed(be, &shapes)?;
        Ok(Trainer { spec, params, adamw, opt, pending: None })
    }

    /// One AdamW step on the mean cross-entropy of the batch `x (B, H)`, `labels (B)`. Everything stays on the
    /// backend: nothing is read back.
    pub fn step(&mut self, be: &B, x: &B::Tensor, labels: &[u32]) -> Result<()> {
        self.accumulate(be, x, labels)?;
        self.apply(be, self.opt.lr)
    }

    /// Adds the gradients of the batch's mean cross-entropy to the step being accumulated; returns the batch's
    /// logits `(B, C)`.
    pub fn accumulate(&mut self, be: &B, x: &B::Tensor, labels: &[u32]) -> Result<B::Tensor> {
        let acts = forward(be, &self.spec, &self.params, x)?;
        let grads = backward(be, &self.spec, &self.params, x, &acts, labels)?;
        self.pending = Some(match self.pending.take() {
            None => (grads, 1),
            Some((sum, n)) => (sum.iter().zip(&grads).map(|(s, g)| be.add(s, g)).collect::<Result<_>>()?, n + 1),
        });
        Ok(acts.logits)
    }

    /// AdamW at learning rate `lr` with the mean of the accumulated gradients (weight decay on every parameter, as
    /// `AdamW(head.parameters())`).
    pub fn apply(&mut self, be: &B, lr: f32) -> Result<()> {
        let (grads, n) = self.pending.take().ok_or_else(|| Error::Input("no gradients to apply".into()))?;
        let t = self.adamw.begin_step();
        let o = self.opt;
        let mut s = AdamWStep::new(lr, o.weight_decay, o.beta1, o.beta2, o.eps, t);
        s.grad_scale = 1.0 / n as f32;
        let shapes = self.spec.param_shapes();
        for i in 0..self.params.len() {
            self.params[i] = self.adamw.update(be, i, shapes.len(), &self.params[i], shapes[i], &grads[i], &s, None)?;
        }
        Ok(())
    }

    /// Micro-batches accumulated for the next [`Self::apply`].
    pub fn pending_batches(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.1)
    }

    /// The parameters on the host, in order.
    pub async fn read_params(&self, be: &B) -> Result<Vec<Vec<f32>>> {
        let mut host = Vec::with_capacity(self.params.len());
        for p in &self.params {
            host.push(be.read(p).await?);
        }
        Ok(host)
    }

    /// Replaces the parameters with host values of their shapes (AdamW's state is kept).
    pub fn set_params(&mut self, be: &B, host: &[Vec<f32>]) -> Result<()> {
        let shapes = self.spec.param_shapes();
        if host.len() != shapes.len() || host.iter().zip(&shapes).any(|(v, &(r, c))| v.len() != r * c) {
            return Err(Error::Input("head parameters do not match the head's shape".into()));
        }
        self.params = host.iter().zip(&shapes).map(|(v, &(r, c))| be.input(v, r, c)).collect::<Result<_>>()?;
        Ok(())
    }
}

/// Mean cross-entropy and accuracy of host logits `(n, C)` against `labels`, in f64.
pub fn loss_and_accuracy(logits: &[f32], classes: usize, labels: &[u32]) -> (f32, f32) {
    if labels.is_empty() {
        return (f32::NAN, f32::NAN);
    }
    let mut loss = 0f64;
    let mut correct = 0usize;
    for (row, &y) in logits.chunks_exact(classes).zip(labels) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = row.iter().map(|&z| (z as f64 - max).exp()).sum::<f64>().ln() + max;
        loss += lse - row[y as usize] as f64;
        correct += (argmax(row) == y as usize) as usize;
    }
    ((loss / labels.len() as f64) as f32, correct as f32 / labels.len() as f32)
}

/// The trained head answers in the same `{label, score}` as the checkpoint's classifier.
pub use crate::heads::classifier::LabelScore;

impl<B: Backend> TrainedHead<B> {
    /// Puts host parameters on the backend.
    pub fn from_host(be: &B, spec: HeadSpec, host: Vec<Vec<f32>>) -> Result<TrainedHead<B>> {
        let shapes = spec.param_shapes();
        if host.len() != shapes.len() || host.iter().zip(&shapes).any(|(v, &(r, c))| v.len() != r * c) {
            return Err(Error::Input("head parameters do not match the head's shape".into()));
        }
        let params = host.iter().zip(&shapes).map(|(v, &(r, c))| be.input(v, r, c)).collect::<Result<_>>()?;
        Ok(TrainedHead { spec, params, host })
    }

    /// Logits `(B, C)` of pooled features `(B, H)`.
    pub fn logits(&self, be: &B, pooled: &B::Tensor) -> Result<B::Tensor> {
        Ok(forward(be, &self.spec, &self.params, pooled)?.logits)
    }

    /// One row of logits → `{label, score}` (softmax) best first, the best `top_k` or all.
    pub fn postprocess(&self, logits: &[f32], top_k: Option<usize>) -> Vec<LabelScore> {
        crate::heads::classifier::rank_labels(&self.spec.labels, crate::heads::softmax(logits), top_k)
    }

    /// The head as a safetensors file: f32 tensors under Hugging Face names ([`HeadSpec::param_names`]; 1-D
    /// biases), and in the metadata `pooling` (`mean`|`cls`), `id2label` (JSON `{"0": "label", ...}`),
    /// `hidden_size` (the encoder's), and for a hidden layer `head_hidden_size` and `head_activation`.
    pub fn export(&self) -> Result<Vec<u8>> {
        export_safetensors(&self.spec, &self.host)
    }
}

/// Writes the safetensors layout directly (8-byte little-endian header length, JSON header, raw data) rather than
/// through `safetensors::serialize`, whose metadata is a `HashMap`: its random iteration order would make the same
/// head give different bytes from run to run. Here keys are sorted (`BTreeMap`), so a head's file is reproducible.
pub fn export_safetensors(spec: &HeadSpec, host: &[Vec<f32>]) -> Result<Vec<u8>> {
    use crate::weights::safetensors::{write_f32, F32Tensor};
    use std::collections::BTreeMap;
    let shapes = spec.param_shapes();
    if host.len() != shapes.len() || host.iter().zip(&shapes).any(|(v, &(r, c))| v.len() != r * c) {
        return Err(Error::Input("head parameters do not match the head's shape".into()));
    }
    let mut meta = BTreeMap::new();
    meta.insert("format", "pt".to_string());
    meta.insert("pooling", spec.pooling.name().to_string());
    let id2label: BTreeMap<usize, &str> = spec.labels.iter().enumerate().map(|(i, l)| (i, l.as_str())).collect();
    meta.insert("id2label", serde_json::to_string(&id2label)?);
    meta.insert("hidden_size", spec.input_size.to_string());
    if let Some((d, a)) = spec.hidden {
        meta.insert("head_hidden_size", d.to_string());
        meta.insert("head_activation", a.name().to_string());
    }
    let names = spec.param_names();
    let tensors: Vec<F32Tensor<'_>> = host
        .iter()
        .zip(&shapes)
        .enumerate()
        .map(|(i, (v, &(r, c)))| F32Tensor {
            name: names[i].to_string(),
            shape: if r == 1 { vec![c] } else { vec![r, c] }, // biases are 1-D, as in PyTorch
            values: v,
        })
        .collect();
    write_f32(&tensors, &meta)
}

/// Parses a head file made by [`export_safetensors`] for an encoder of hidden size `encoder_hidden`.
pub fn import_safetensors(bytes: &[u8], encoder_hidden: usize) -> Result<(HeadSpec, Vec<Vec<f32>>)> {
    use safetensors::SafeTensors;
    let bad = |m: String| Error::Weights(format!("head file: {m}"));
    let (_, header) = SafeTensors::read_metadata(bytes)
        .map_err(|e| bad(format!("not a valid safetensors file ({e}); export it again with train-head / exportHead")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let get = |k: &str| {
        meta.get(k).ok_or_else(|| {
            bad(format!("the metadata has no `{k}`: this is not a head written by train-head / exportHead"))
        })
    };
    let pooling: Pooling = get("pooling")?.parse()?;
    let input_size: usize =
        get("hidden_size")?.parse().map_err(|_| bad("`hidden_size` in the metadata is not a number".into()))?;
    if input_size != encoder_hidden {
        return Err(Error::Input(format!(
            "this head was trained on features of size {input_size}, but the model's hidden size is {encoder_hidden}: \
             load it with the model it was trained on (or train a new head for this model)"
        )));
    }
    let id2label: HashMap<String, String> = serde_json::from_str(get("id2label")?)
        .map_err(|e| bad(format!("`id2label` in the metadata is not a JSON object of strings ({e})")))?;
    let n = id2label.len();
    if n < 2 {
        return Err(bad(format!("`id2label` has {n} label(s); a classifier needs at least 2")));
    }
    let labels = (0..n)
        .map(|i| id2label.get(&i.to_string()).cloned().ok_or_else(|| bad(format!("`id2label` lacks key \"{i}\" (keys must be 0..{n})"))))
        .collect::<Result<Vec<_>>>()?;
    let hidden = match meta.get("head_hidden_size") {
        None => None,
        Some(d) => {
            let d: usize = d.parse().map_err(|_| bad("`head_hidden_size` is not a number".into()))?;
            if d == 0 || d > 1 << 16 {
                return Err(bad(format!("`head_hidden_size` {d} is out of range (1..=65536)")));
            }
            Some((d, get("head_activation")?.parse::<Activation>()?))
        }
    };
    let spec = HeadSpec { input_size, hidden, labels, pooling };
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("not a valid safetensors file ({e})")))?;
    let mut host = Vec::new();
    for (name, &(r, c)) in spec.param_names().iter().zip(&spec.param_shapes()) {
        let view = st.tensor(name).map_err(|_| bad(format!("tensor `{name}` is missing")))?;
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(bad(format!("tensor `{name}` is {:?}; heads are stored as F32", view.dtype())));
        }
        let want: Vec<usize> = if r == 1 { vec![c] } else { vec![r, c] };
        if view.shape() != want.as_slice() {
            return Err(Error::Shape { name: name.to_string(), got: view.shape().to_vec(), expected: want });
        }
        host.push(view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect());
    }
    Ok((spec, host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_file_round_trip_and_errors() {
        let spec = HeadSpec {
            input_size: 4,
            hidden: Some((3, Activation::Gelu)),
            labels: vec!["a".into(), "b é".into()],
            pooling: Pooling::Cls,
        };
        let host = spec.init(&mut SplitMix64::new(1));
        let bytes = export_safetensors(&spec, &host).unwrap();
        let (spec2, host2) = import_safetensors(&bytes, 4).unwrap();
        assert_eq!(spec2, spec);
        assert_eq!(host2, host);
        assert!(export_safetensors(&spec, &host).unwrap() == bytes, "the same head gives the same bytes");
        // The safetensors crate reads our layout.
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("classifier.out_proj.weight").unwrap().shape(), &[2, 3]);
        assert_eq!(st.tensor("classifier.dense.bias").unwrap().shape(), &[3]);
        let e = import_safetensors(&bytes, 384).unwrap_err().to_string();
        assert!(e.contains("size 4") && e.contains("384"), "{e}");
        assert!(import_safetensors(&bytes[..bytes.len() - 3], 4).is_err());
        assert!(import_safetensors(b"not a file", 4).is_err());
    }
}
