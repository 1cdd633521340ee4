//! The op set the BERT model is written against, and its two implementations.
//!
//! - [`cpu`]: plain Rust; the reference every GPU kernel is tested against, and the fallback where there is no
//!   WebGPU.
//! - `gpu`: `wgpu` + WGSL. Ops are *recorded*, not run: the whole forward of a batch becomes one submission, and
//!   [`Backend::read`] submits and reads back only the tensor asked for.
//!
//! Every tensor an op sees is a row-major matrix `(rows, cols)`; a batch of sequences is flattened to
//! `(B*T, H)` with sequence `b`'s token `t` at row `b*T + t`. Weights keep the layout Hugging Face stores:
//! a linear layer's weight is `(out, in)`, so `linear` computes `x · wᵀ`.

pub mod cpu;
#[cfg(not(target_arch = "wasm32"))]
pub mod gpu;
#[cfg(target_arch = "wasm32")]
pub mod gpu;

pub use crate::activation::Activation;
pub use crate::dtype::Dtype;
use crate::tokenizer::Batch;

/// How [`Backend::pool_tokens`] reduces a sequence's kept tokens (the kept count `n = Σ mask`, clamped to 1e-9 as
/// sentence-transformers clamps it). The code is the kernel's `Params.mode` (shaders/pool.wgsl).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenPool {
    /// `Σ mask·x / n`.
    Mean = 0,
    /// The largest `x` among the kept tokens; `-inf` where none is kept (`masked_fill(-inf).max()`).
    Max = 1,
    /// `Σ mask·x / √n`.
    MeanSqrtLen = 2,
    /// `Σ mask·(t+1)·x / Σ mask·(t+1)`: token `t` (from 0) weighs `t + 1`.
    WeightedMean = 3,
}
use crate::weights::HostTensor;
use crate::Result;

/// An attention mask `(B, T)` holds 1.0 for a real token (any value above 0.5 reads as real) and 0.0 for padding
/// ([`Backend::mask`]). A training forward may also mark a padded position whose query transformers masks whole:
/// every score of its row the same `finfo.min`, so its softmax is uniform over all T keys, padding included, and its
/// context is the mean of every value (times the dropout factors). As a key such a position is padding. Two marks,
/// for transformers' two ways of masking: [`UNIFORM_FILLED`] and [`UNIFORM_ADDED`]. Inference never makes them, and
/// a real query's context does not depend on them.
///
/// DeBERTa's `masked_fill` (`DisentangledSelfAttention`, every padded query): the row's scores get no gradient.
pub const UNIFORM_FILLED: f32 = -1.0;
/// The additive `finfo.min` mask (`eager_attention_forward`: ModernBERT's local layers, a padded query whose window
/// holds no real key): autograd goes through the addition, so the scores get the softmax's gradient at the uniform
/// P: `dS_ij = (dP_ij − Σ_j dP_ij / T) / T` over all T keys.
pub const UNIFORM_ADDED: f32 = -2.0;

/// Shape of a multi-head self-attention over a padded batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Sequences in the batch.
    pub batch: usize,
    /// Padded length of every sequence.
    pub seq: usize,
    pub heads: usize,
    /// `hidden / heads`.
    pub head_dim: usize,
}

/// The additive terms of one attention call's scores, as the backends' kernels take them:
/// [`Backend::attention_biased`]'s relative bias, or [`Backend::attention_disentangled`]'s projected rows and their
/// index per offset.
#[derive(Clone, Copy, Debug)]
pub enum ScoreBias<'a, T> {
    None,
    /// `(heads, 2T − 1)`.
    Relative(&'a T),
    /// `pos` `(R, 3H)`, `rows` `(1, 2T − 1)`.
    Disentangled { pos: &'a T, rows: &'a T },
}

/// The word/position/token-type embedding tables and the LayerNorm that follows their sum.
pub struct EmbeddingTables<'a, T> {
    pub word: &'a T,        // (vocab, H)
    /// `(max_position_embeddings, H)`; `None` for the rotary families, whose positions turn the queries and keys
    /// instead ([`Backend::rotary`]).
    pub position: Option<&'a T>,
    pub token_type: &'a T,  // (type_vocab_size, H)
    pub ln_gamma: &'a T,    // (H)
    pub ln_beta: &'a T,     // (H)
    pub eps: f32,
}

/// One dropout site of a training forward (`torch.nn.Dropout` in train mode): element `i` of the tensor it applies
/// to is kept iff `hash(key, i) ≥ threshold`, and kept values are multiplied by `scale`:
/// `y = x ⊙ M · scale` with `scale = 1/(1 − p)` rounded to f32 once (torch's `native_dropout`: `x.mul(mask).mul_(scale)`).
///
/// The mask is never stored: a counter-based hash of (`seed`, `stream`, element index) gives each bit, so the
/// forward and the backward recompute the same mask, and the CPU ([`Dropout::keeps`]) and the WGSL kernels
/// (`shaders/lib/dropout.wgsl`) compute it with the same 32-bit integer operations, bit for bit. The hash is PCG's
/// output permutation used as a hash (Jarzynski & Olano, "Hash Functions for GPU Rendering", JCGT 2020):
/// `key = pcg(pcg(seed) ^ stream)`, `bits(i) = pcg(pcg(i + key) ^ key)`; `threshold = round(p · 2³²)`, so an
/// element is kept with probability `1 − threshold / 2³²` (within 2⁻³³ of `1 − p`). A training forward takes a
/// new `seed`; each site of it (a layer's hidden dropout, its attention probabilities) a `stream` of its own.
/// Element indices are `u32` and wrap past 2³² elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// The probability of dropping an element, in `[0, 1)`; 0 leaves every value as it is (callers skip the op).
    pub p: f32,
    pub seed: u32,
    pub stream: u32,
}

/// PCG's RXS-M-XS output permutation of a 32-bit LCG step: a bijection of `u32` with good avalanche.
pub const fn pcg_hash(v: u32) -> u32 {
    let state = v.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
    let word = ((state >> ((state >> 28) + 4)) ^ state).wrapping_mul(277_803_737);
    (word >> 22) ^ word
}

impl Dropout {
    /// Whether any element is dropped (`p > 0`).
    pub fn is_active(&self) -> bool {
        self.p > 0.0
    }

    /// Checks `p` is in `[0, 1)`.
    pub fn check(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.p) {
            return Err(crate::Error::Input(format!("a dropout probability must be in [0, 1), got {}", self.p)));
        }
        Ok(())
    }

    /// The hash's key for this (seed, stream).
    pub fn key(&self) -> u32 {
        pcg_hash(pcg_hash(self.seed) ^ self.stream)
    }

    /// `round(p · 2³²)`: an element whose hash is below it is dropped.
    pub fn threshold(&self) -> u32 {
        (self.p as f64 * 4_294_967_296.0).round().min(u32::MAX as f64) as u32
    }

    /// `1/(1 − p)` in f32, the factor of the kept values.
    pub fn scale(&self) -> f32 {
        (1.0 / (1.0 - self.p as f64)) as f32
    }

    /// Whether element `i` is kept, given [`Self::key`] and [`Self::threshold`].
    #[inline]
    pub fn keeps(key: u32, threshold: u32, i: u32) -> bool {
        pcg_hash(pcg_hash(i.wrapping_add(key)) ^ key) >= threshold
    }
}

/// The scalars of one AdamW step `t` (1-based), bias corrections computed on the host in f64:
///
/// ```text
/// p ← p − lr·wd·p                         (decoupled weight decay, first, on the old p)
/// m ← β1·m + (1 − β1)·g
/// v ← β2·v + (1 − β2)·g²
/// p ← p − (lr / bc1) · m / (√v / √bc2 + eps)      bc1 = 1 − β1ᵗ, bc2 = 1 − β2ᵗ
/// ```
/// exactly the order of `torch.optim.adamw._single_tensor_adamw` (eps is added after dividing √v by √bc2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    pub lr: f32,
    pub weight_decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// `1 − β1ᵗ`.
    pub bias_correction1: f32,
    /// `√(1 − β2ᵗ)`.
    pub bias_correction2_sqrt: f32,
    /// The gradient is multiplied by this first (e.g. `1/n`: the mean of `n` micro-batches' summed gradients); 1
    /// otherwise.
    pub grad_scale: f32,
    /// Clipping by global norm, as `torch.nn.utils.clip_grad_norm_` does: with `‖g‖ = grad_scale · √norm_sq` (the
    /// norm of the scaled gradients), the gradient is further multiplied by `min(1, max / (‖g‖ + 1e-6))`. Needs
    /// [`Backend::adamw`]'s `norm_sq`.
    pub max_grad_norm: Option<f32>,
}

impl AdamWStep {
    /// The scalars of step `t` (1-based).
    pub fn new(lr: f32, weight_decay: f32, beta1: f32, beta2: f32, eps: f32, t: u32) -> AdamWStep {
        let bc1 = 1.0 - (beta1 as f64).powi(t as i32);
        let bc2 = 1.0 - (beta2 as f64).powi(t as i32);
        AdamWStep {
            lr,
            weight_decay,
            beta1,
            beta2,
            eps,
            bias_correction1: bc1 as f32,
            bias_correction2_sqrt: bc2.sqrt() as f32,
            grad_scale: 1.0,
            max_grad_norm: None,
        }
    }

    /// The multiplier of the raw gradient given its squared global norm (see [`Self::max_grad_norm`]), in f32 as the
    /// kernels compute it; `None` where the norm is not finite (the step must leave everything as it was).
    pub fn effective_scale(&self, norm_sq: Option<f32>) -> Option<f32> {
        let Some(q) = norm_sq else { return Some(self.grad_scale) };
        let norm = q.sqrt() * self.grad_scale;
        if !norm.is_finite() {
            return None;
        }
        Some(match self.max_grad_norm {
            Some(max) => self.grad_scale * (max / (norm + 1e-6)).min(1.0),
            None => self.grad_scale,
        })
    }
}

/// The CPU backend's budget for one activation tensor: 256 MiB keeps a forward of any batch within a few times
/// that (a handful of activations live at once), e.g. 85 sequences of 512 tokens of MiniLM's `(B*T, 4H)` FFN.
pub const CPU_MAX_TENSOR_BYTES: usize = 256 << 20;

/// The operations BERT needs. One model, written once against this trait, runs on either backend.
#[allow(async_fn_in_trait)] // used through generics only; the futures are not sent across threads
pub trait Backend {
    /// A matrix on the device: activations are f32; weights may be f32, f16, Q8_0 or Q4_0.
    type Tensor;

    /// `"cpu"` or `"gpu"`.
    fn name(&self) -> &'static str;

    /// Uploads a weight tensor once, at load. Matrices keep their host dtype (f32, f16, Q8_0, Q4_0; a quantized
    /// matrix's rows must be whole blocks of 32); 1-D tensors (biases, LayerNorm γ/β) are widened to f32 and become
    /// `(1, n)`. Only `linear` (the weight) and `embeddings` (the three tables) read non-f32 tensors; every other op
    /// refuses them with an error.
    fn upload(&self, t: &HostTensor) -> Result<Self::Tensor>;

    /// [`Backend::upload`] of `parts` stacked along their first dimension (the q, k, v weights as one matrix). A GPU
    /// joins weights already in its memory there ([`crate::weights::Placed`]).
    fn upload_rows(&self, parts: &[&HostTensor]) -> Result<Self::Tensor> {
        self.upload(&HostTensor::concat_rows(parts)?)
    }

    /// [`Backend::upload`] of a weight held by the loaded [`crate::weights::Weights`] ([`Weights::get_shared`]): a
    /// backend whose tensors live in host memory keeps the `Arc` instead of a copy, so the model holds one copy of
    /// its weights, not the file's decoded tensors and the backend's. A GPU copies it to the device, as `upload`.
    ///
    /// [`Weights::get_shared`]: crate::weights::Weights::get_shared
    fn upload_shared(&self, t: &std::sync::Arc<HostTensor>) -> Result<Self::Tensor> {
        self.upload(t)
    }

    /// [`Backend::upload_shared`] of an embedding table, which `embeddings` reads rows of (and the MLM head, tied,
    /// multiplies by): a backend that keeps linear weights in a form for its GEMM keeps a table as loaded.
    fn upload_table(&self, t: &std::sync::Arc<HostTensor>) -> Result<Self::Tensor> {
        self.upload_shared(t)
    }

    /// Uploads an f32 activation matrix from the host (used by tests, heads and training).
    fn input(&self, data: &[f32], rows: usize, cols: usize) -> Result<Self::Tensor>;

    /// `(rows, cols)` of a tensor.
    fn dims(&self, t: &Self::Tensor) -> (usize, usize);

    /// How a tensor's elements are stored.
    fn dtype(&self, t: &Self::Tensor) -> Dtype;

    /// The largest tensor, in bytes, the backend can hold at once: the tasks split a batch so that its widest
    /// activation stays under it. A GPU says its adapter's largest storage binding; the CPU a memory budget.
    fn max_tensor_bytes(&self) -> usize {
        CPU_MAX_TENSOR_BYTES
    }

    /// The most memory all of the backend's tensors can take, where it has a hard limit: wasm32's 4 GiB address
    /// space for the CPU backend in the browser. Training refuses a run that could not fit
    /// ([`crate::training::fit::memory::TrainingMemory::check_fits`]) instead of failing in the middle.
    fn memory_limit(&self) -> Option<u64> {
        None
    }

    /// `LayerNorm(word[ids] + position[t] + token_type[type_ids])` for every token of the batch → `(B*T, H)`.
    /// Position ids are `0..T` in every row (right padding).
    fn embeddings(&self, batch: &Batch, tables: &EmbeddingTables<'_, Self::Tensor>) -> Result<Self::Tensor>;

    /// `act(x · wᵀ + bias)`: x `(M, K)`, w `(N, K)`, bias `(N)` → `(M, N)`.
    fn linear(&self, x: &Self::Tensor, w: &Self::Tensor, bias: Option<&Self::Tensor>, act: Activation)
        -> Result<Self::Tensor>;

    /// Row-wise `LayerNorm(x + residual)·gamma + beta` with biased variance, as PyTorch: x `(M, N)` → `(M, N)`.
    fn layernorm(&self, x: &Self::Tensor, residual: Option<&Self::Tensor>, gamma: &Self::Tensor,
        beta: &Self::Tensor, eps: f32) -> Result<Self::Tensor>;

    /// The `(B, T)` attention mask of a batch: 1.0 for real tokens, 0.0 for padding.
    fn mask(&self, batch: &Batch) -> Result<Self::Tensor>;

    /// Scaled dot-product self-attention per (sequence, head): `softmax(q·kᵀ/√d + maskbias)·v`, where padded keys get
    /// `-inf` (a row whose keys are all padding yields zeros; a query marked [`UNIFORM_FILLED`] or [`UNIFORM_ADDED`]
    /// gets the mean of every value). `qkv` is `(B*T, 3H)`, the fused projections
    /// `[q | k | v]` with head `h` at columns `h*d..(h+1)*d` of each; returns the context `(B*T, H)`.
    fn attention(&self, qkv: &Self::Tensor, mask: &Self::Tensor, shape: AttentionShape) -> Result<Self::Tensor> {
        self.attention_biased(qkv, mask, None, shape)
    }

    /// [`Self::attention`] with an additive bias on the scores that depends on the key's offset from the query
    /// (relative positions: MPNet's T5-style buckets), the same for every sequence: `bias` `(heads, 2T − 1)` adds
    /// `bias[h][j − i + T − 1]` to the scaled score of query `i` and key `j` in head `h`, before the mask and the
    /// softmax (`softmax(q·kᵀ/√d + bias + maskbias)·v`). `None` is [`Self::attention`] itself: one kernel, the bias an
    /// input of it.
    fn attention_biased(&self, qkv: &Self::Tensor, mask: &Self::Tensor, bias: Option<&Self::Tensor>,
        shape: AttentionShape) -> Result<Self::Tensor>;

    /// Rotary position embeddings (transformers' `apply_rotary_pos_emb`, the `rotate_half` form) on the queries and
    /// keys of qkv `(B*T, 3H)`: in each head, dimension `i < d/2` of token `t` becomes `x_i·cos − x_{i+d/2}·sin` and
    /// dimension `i + d/2` becomes `x_{i+d/2}·cos + x_i·sin`, the angle's `cos` and `sin` read from `rope` `(P, d)`
    /// with `P ≥ T`: row `t` holds `cos(t·f_0 … t·f_{d/2−1})` then `sin(…)`. The values are copied as they are.
    /// Positions are `0..T` in every sequence (right padding; padded keys are masked).
    fn rotary(&self, qkv: &Self::Tensor, rope: &Self::Tensor, shape: AttentionShape) -> Result<Self::Tensor>;

    /// The gated feed-forward's product: x `(R, 2I)` holding `[up | gate]` → `up ⊙ act(gate)` `(R, I)`.
    fn glu(&self, x: &Self::Tensor, act: Activation) -> Result<Self::Tensor>;

    /// `glu(linear(x, w, bias, None), act)` as one op, the gated feed-forward's up-projection and product: x `(M, K)`,
    /// w `(2I, K)` holding `[up; gate]`, bias `(2I)` → `up ⊙ act(gate)` `(M, I)`, the same values. A backend may fuse
    /// the product into the matmul's epilogue, so that the `(M, 2I)` `[up | gate]` is never stored and read back (the
    /// CPU does); by default the two ops in turn.
    fn linear_glu(&self, x: &Self::Tensor, w: &Self::Tensor, bias: Option<&Self::Tensor>, act: Activation)
        -> Result<Self::Tensor> {
        let both = self.linear(x, w, bias, Activation::None)?; // (M, 2I)
        self.glu(&both, act)
    }

    /// Back through [`Self::glu`]: dy `(R, I)` and the x `(R, 2I)` = `[up | gate]` it read → dx `(R, 2I)` =
    /// `[dy ⊙ act(gate) | dy ⊙ up ⊙ act'(gate)]`, `act'` the derivative [`Self::activation_grad`] uses (SiLU, exact
    /// and tanh GELU, ...).
    fn glu_backward(&self, dy: &Self::Tensor, x: &Self::Tensor, act: Activation) -> Result<Self::Tensor>;

    /// DeBERTa's disentangled attention (`model::disentangled` states the model's side), one kernel with
    /// [`Self::attention`]'s: each score gets content→position and position→content terms that depend on the query's
    /// and the key's content, added before the mask and the softmax:
    /// `s(i, j) = (q_i·k_j + q_i·posK_r + k_j·posQ_r) / √(3d)` with `r = rows[j − i + T − 1]`, where `pos` `(R, 3H)`
    /// is the relative table's rows projected by the layer's own fused q/k/v weights (`[posQ | posK | unused]`, head
    /// `h` at columns `h*d..(h+1)*d` of each third, as `qkv`) and `rows` `(1, 2T − 1)` the row of `pos` each offset
    /// reads (an integer in f32; the same for every sequence and head). `1/√(3d)` is transformers'
    /// `1/√(d·scale_factor)` with both `c2p` and `p2c`. `qkv`, `mask` and the result as in [`Self::attention`].
    fn attention_disentangled(&self, qkv: &Self::Tensor, mask: &Self::Tensor, pos: &Self::Tensor, rows: &Self::Tensor,
        shape: AttentionShape) -> Result<Self::Tensor>;

    /// Mean over the real tokens of each sequence: x `(B*T, H)`, mask `(B, T)` → `(B, H)`.
    fn mean_pool(&self, x: &Self::Tensor, mask: &Self::Tensor, batch: usize, seq: usize) -> Result<Self::Tensor> {
        self.pool_tokens(x, mask, batch, seq, TokenPool::Mean)
    }

    /// A reduction over the tokens the mask keeps (1.0; 0.0 for padding, or a prompt token left out), by `mode`:
    /// x `(B*T, H)`, mask `(B, T)` → `(B, H)`, as sentence-transformers' Pooling computes it.
    fn pool_tokens(&self, x: &Self::Tensor, mask: &Self::Tensor, batch: usize, seq: usize, mode: TokenPool)
        -> Result<Self::Tensor>;

    /// Selects rows (e.g. the `[CLS]` rows `b*T`, or the `[MASK]` rows): x `(M, N)` → `(rows.len(), N)`.
    fn gather_rows(&self, x: &Self::Tensor, rows: &[u32]) -> Result<Self::Tensor>;

    // ---- Training ops (head training, `training/head.rs` states the math they serve) ----

    /// `op(a) · op(b)` with `op` a transpose when asked: `op(a)` is `(M, K)` (a is `(K, M)` when `trans_a`),
    /// `op(b)` is `(K, N)` (b is `(N, K)` when `trans_b`) → `(M, N)`. Serves the backward pass: `dW = dZᵀ·X`
    /// (`trans_a`), `dX = dZ·W` (neither), the bias gradient `1ᵀ·dZ`.
    fn matmul(&self, a: &Self::Tensor, trans_a: bool, b: &Self::Tensor, trans_b: bool) -> Result<Self::Tensor>;

    /// `dy · w` for a weight `w` `(N, K)` in its stored dtype (f32, f16, Q8_0, Q4_0; the layout [`Self::linear`]
    /// reads) and `dy` `(M, N)` f32 → `(M, K)`: the input gradient `dX = dY·W` through a linear whose weight is
    /// frozen and stays quantized (LoRA over a quantized base). The weight's values are its dequantized ones, exactly
    /// as `linear` decodes them; only the summation order differs from [`Self::matmul`] on the dequantized matrix.
    fn matmul_weight(&self, dy: &Self::Tensor, w: &Self::Tensor) -> Result<Self::Tensor>;

    /// The gradient of the mean softmax cross-entropy over a batch with respect to its logits:
    /// logits `(B, C)`, `labels` (B) in `0..C` → `(softmax(z) − onehot(y)) / B` `(B, C)`.
    fn softmax_xent_grad(&self, logits: &Self::Tensor, labels: &[u32]) -> Result<Self::Tensor>;

    /// Back through an activation: `dy ⊙ act'(pre)` where `pre` is the input the activation saw; both `(M, N)`.
    fn activation_grad(&self, dy: &Self::Tensor, pre: &Self::Tensor, act: Activation) -> Result<Self::Tensor>;

    /// One AdamW step on one parameter tensor, as `torch.optim.AdamW`: returns the new `(param, m, v)`, all of the
    /// parameter's shape. `norm_sq` `(1, 1)`, when given, is the squared global norm of the step's gradients as
    /// passed (before `grad_scale`), summed over every trained parameter: the step clips by it
    /// ([`AdamWStep::max_grad_norm`]), and where the norm is not finite (a NaN or infinite loss) nothing is updated:
    /// the outputs equal the inputs. The check and the clipping happen where the gradients are, so a step needs no
    /// read-back before its update. Clipping without `norm_sq` is an error.
    fn adamw(&self, param: &Self::Tensor, grad: &Self::Tensor, m: &Self::Tensor, v: &Self::Tensor, step: &AdamWStep,
        norm_sq: Option<&Self::Tensor>) -> Result<(Self::Tensor, Self::Tensor, Self::Tensor)>;

    // ---- Backward ops (fine-tuning the encoder; `training/encoder/mod.rs` states the math they serve) ----

    /// `a + b`, elementwise; both `(M, N)` (residual sums, gradients of a tensor read twice).
    fn add(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor>;

    /// `act(x)`, elementwise: an activation apart from its linear, so that its input can be kept for the backward.
    fn activation(&self, x: &Self::Tensor, act: Activation) -> Result<Self::Tensor>;

    /// The same `M·N` values, row-major, as `(rows, cols)` (e.g. a column of `B·T` logits as `(B, T)`).
    fn reshape(&self, x: &Self::Tensor, rows: usize, cols: usize) -> Result<Self::Tensor>;

    /// Column sums: x `(M, N)` → `(1, N)` (a bias's gradient is the column sum of its output's gradient).
    fn sum_rows(&self, x: &Self::Tensor) -> Result<Self::Tensor>;

    /// `Σ x²` over every element → `(1, 1)` (the squared norm a gradient clipping adds up).
    fn sum_squares(&self, x: &Self::Tensor) -> Result<Self::Tensor>;

    /// `Σ x²` over every element of every tensor of `xs` → `(1, 1)`: the squared global norm of a step's gradients.
    /// By default [`Self::sum_squares`] of each, added in order; the GPU sums every tensor's chunks into one buffer
    /// and reduces that once (two hundred tensors in one pass each, not three).
    fn sum_squares_all(&self, xs: &[&Self::Tensor]) -> Result<Self::Tensor> {
        let mut total: Option<Self::Tensor> = None;
        for x in xs {
            let sq = self.sum_squares(x)?;
            total = Some(match total {
                None => sq,
                Some(t) => self.add(&t, &sq)?,
            });
        }
        total.ok_or_else(|| crate::Error::Input("sum_squares_all: no tensors".into()))
    }

    /// Back through [`Self::gather_rows`]: x `(rows.len(), N)` → `(total, N)`: row `rows[i]` gets x's row `i`
    /// (summed where a row index repeats), every other row zero.
    fn scatter_rows(&self, x: &Self::Tensor, rows: &[u32], total: usize) -> Result<Self::Tensor>;

    /// `word[ids] + position[t] + token_type[type_ids]` → `(B*T, H)`: [`Self::embeddings`] without its LayerNorm,
    /// whose input the backward needs. The LayerNorm fields of `tables` are not read.
    fn embeddings_sum(&self, batch: &Batch, tables: &EmbeddingTables<'_, Self::Tensor>) -> Result<Self::Tensor>;

    /// Back through [`Self::embeddings_sum`]: `d (B*T, H)` → the gradients of the word `(vocab, H)`, position
    /// `(positions, H)` and token type `(types, H)` tables. Each table row gets the sum of the rows of `d` whose token
    /// read it (a scatter-add); rows no token read are zero. The word row `pad` (the checkpoint's `pad_token_id`)
    /// gets none: `BertEmbeddings`' word table is an `nn.Embedding` with `padding_idx`, whose row PyTorch never
    /// updates. Padding tokens still add to their position and token type rows.
    fn embeddings_backward(&self, d: &Self::Tensor, batch: &Batch, vocab: usize, positions: usize, types: usize,
        pad: Option<u32>)
        -> Result<(Self::Tensor, Self::Tensor, Self::Tensor)>;

    /// Back through `y = (x − mean) / √(var + eps) · γ + β` row-wise over N (biased variance, as
    /// [`Self::layernorm`]): `dy (M, N)`, `x (M, N)` the LayerNorm's input (the residual already added) →
    /// `(dx (M, N), dγ (1, N), dβ (1, N))`. Mean and variance are recomputed from `x`.
    fn layernorm_backward(&self, dy: &Self::Tensor, x: &Self::Tensor, gamma: &Self::Tensor, eps: f32)
        -> Result<(Self::Tensor, Self::Tensor, Self::Tensor)>;

    /// Back through [`Self::attention`]: `dctx (B*T, H)`, the `qkv (B*T, 3H)` and mask it read → `dqkv (B*T, 3H)`
    /// (`[dq | dk | dv]`). The probabilities are recomputed: with `P = softmax(q·kᵀ/√d + maskbias)` per (sequence,
    /// head), `dv = Pᵀ·dctx`, `dP = dctx·vᵀ`, `dS = P ⊙ (dP − rowsum(dP ⊙ P))`, `dq = dS·k/√d`, `dk = dSᵀ·q/√d`. A query
    /// whose keys are all padding had a zero context and gets zero gradients; a marked query's row as its mark says
    /// ([`UNIFORM_FILLED`]: `dv_j += F_ij·dctx_i / T` only). With `dropout` (the forward was
    /// [`Self::attention_dropout`] with it), the same mask `M` is recomputed: `D = P ⊙ M · scale`, `dv = Dᵀ·dctx`,
    /// `dP = (dctx·vᵀ) ⊙ M · scale`, and `dS` as above from the undropped `P`. `None` (or `p = 0`): no dropout.
    fn attention_backward(&self, dctx: &Self::Tensor, qkv: &Self::Tensor, mask: &Self::Tensor, shape: AttentionShape,
        dropout: Option<Dropout>) -> Result<Self::Tensor> {
        Ok(self.attention_backward_biased(dctx, qkv, mask, None, shape, dropout, false)?.0)
    }

    /// Back through [`Self::attention_biased`] (or [`Self::attention_dropout_biased`] with `dropout`): the
    /// probabilities are recomputed with the same `bias` `(heads, 2T − 1)` added to the scaled scores, then `dqkv` as
    /// [`Self::attention_backward`]. With `want_dbias`, also the bias's gradient `(heads, 2T − 1)`:
    /// `dbias[h][j − i + T − 1] = Σ_b dS[b, h, i, j]`, `dS = P ⊙ (dP − rowsum(dP ⊙ P))` the softmax input's gradient
    /// (without the `1/√d` of the scores, which the bias does not go through); padded keys add nothing. Without
    /// `want_dbias` (a constant bias, e.g. a sliding window) it is not computed and `None` comes back. `bias: None`
    /// is [`Self::attention_backward`] (and has no gradient to give).
    #[allow(clippy::too_many_arguments)]
    fn attention_backward_biased(&self, dctx: &Self::Tensor, qkv: &Self::Tensor, mask: &Self::Tensor,
        bias: Option<&Self::Tensor>, shape: AttentionShape, dropout: Option<Dropout>, want_dbias: bool)
        -> Result<(Self::Tensor, Option<Self::Tensor>)>;

    // ---- Dropout (training forwards only; [`Dropout`] states the mask) ----

    /// `x ⊙ M · scale` elementwise, `M` the mask of `d` over x's row-major elements; its own backward (the same call
    /// on the output's gradient). Not called with `p = 0`.
    fn dropout(&self, x: &Self::Tensor, d: Dropout) -> Result<Self::Tensor>;

    /// [`Self::attention`] with dropout on the probabilities after the softmax:
    /// `ctx = (P ⊙ M · scale)·v`, `M` the mask of `d` over the `(B, heads, T, T)` probabilities, element
    /// `((b·heads + h)·T + i)·T + j` for query `i` and key `j`. Training only; the inference kernels are untouched.
    fn attention_dropout(&self, qkv: &Self::Tensor, mask: &Self::Tensor, shape: AttentionShape, d: Dropout)
        -> Result<Self::Tensor> {
        self.attention_dropout_biased(qkv, mask, None, shape, d)
    }

    /// [`Self::attention_dropout`] with [`Self::attention_biased`]'s relative bias `(heads, 2T − 1)` on the scores
    /// (MPNet's training forward); `None` is [`Self::attention_dropout`].
    fn attention_dropout_biased(&self, qkv: &Self::Tensor, mask: &Self::Tensor, bias: Option<&Self::Tensor>,
        shape: AttentionShape, d: Dropout) -> Result<Self::Tensor>;

    /// [`Self::attention_disentangled`] with dropout on the probabilities after the softmax, its mask as
    /// [`Self::attention_dropout`]'s: DeBERTa's training forward.
    fn attention_dropout_disentangled(&self, qkv: &Self::Tensor, mask: &Self::Tensor, pos: &Self::Tensor,
        rows: &Self::Tensor, shape: AttentionShape, d: Dropout) -> Result<Self::Tensor>;

    /// Back through [`Self::attention_disentangled`] (or [`Self::attention_dropout_disentangled`] with `dropout`):
    /// `dctx (B*T, H)` and the `qkv`, `mask`, `pos (R, 3H)`, `rows (1, 2T − 1)` it read → `dqkv (B*T, 3H)` and
    /// `dpos (R, 3H)` = `[dposQ | dposK | 0]`. With `G = dS/√(3d)` per (sequence, head) (dS the softmax input's
    /// gradient as in [`Self::attention_backward`]) and `r(i, j) = rows[j − i + T − 1]`:
    /// `dq_i = Σ_j G_ij (k_j + posK_r(i,j))`, `dk_j = Σ_i G_ij (q_i + posQ_r(i,j))`, `dv` as the plain backward,
    /// `dposK_r = Σ_{b, (i, j): r(i,j) = r} G_ij q_i`, `dposQ_r = Σ_{b, (i, j): r(i,j) = r} G_ij k_j`; padded keys add
    /// nothing but a marked query's value gradient (DeBERTa's marks are [`UNIFORM_FILLED`]; the CPU twin refuses
    /// [`UNIFORM_ADDED`] here).
    #[allow(clippy::too_many_arguments)]
    fn attention_backward_disentangled(&self, dctx: &Self::Tensor, qkv: &Self::Tensor, mask: &Self::Tensor,
        pos: &Self::Tensor, rows: &Self::Tensor, shape: AttentionShape, dropout: Option<Dropout>)
        -> Result<(Self::Tensor, Self::Tensor)>;

    /// Runs everything recorded so far and copies one f32 tensor back to the host, row-major.
    async fn read(&self, t: &Self::Tensor) -> Result<Vec<f32>>;

    /// [`Self::read`] of several tensors after one wait (a training step's loss inputs and gradient norm).
    async fn read_many(&self, ts: &[&Self::Tensor]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(ts.len());
        for t in ts {
            out.push(self.read(t).await?);
        }
        Ok(out)
    }
}

/// Checks that a batch's three `(b, t)` arrays have `b*t` entries each; every backend calls this before reading one.
pub fn validate_batch(batch: &Batch) -> Result<()> {
    let n = batch.b * batch.t;
    if batch.input_ids.len() != n || batch.token_type_ids.len() != n || batch.attention_mask.len() != n {
        return Err(crate::Error::Input(format!(
            "a batch of {} × {} needs {n} input ids, token type ids and mask values, got {}, {} and {}",
            batch.b,
            batch.t,
            batch.input_ids.len(),
            batch.token_type_ids.len(),
            batch.attention_mask.len()
        )));
    }
    Ok(())
}

/// Checks a batch against the embedding tables before any lookup; both backends call this. Besides its shape
/// ([`validate_batch`]): its length against the `positions` rows of the position table, and every token id and
/// token type id against the `vocab` rows of the word table and the `types` rows of the token type table (an id
/// outside them, which a tokenizer that does not fit the model can produce, would read past a table).
/// The shape checks of [`Backend::rotary`]'s table: `(P, d)` with `P ≥ T` and `d` the even head size.
pub fn check_rotary(rows: usize, cols: usize, s: AttentionShape) -> Result<()> {
    if s.head_dim % 2 != 0 || cols != s.head_dim || rows < s.seq {
        return Err(crate::Error::Input(format!(
            "rotary: the table is ({rows}, {cols}); it must have a row per position (at least {}) and a column per \
             dimension of an even head size ({})",
            s.seq, s.head_dim
        )));
    }
    Ok(())
}

pub fn validate_embeddings_input(batch: &Batch, vocab: usize, positions: usize, types: usize) -> Result<()> {
    validate_batch(batch)?;
    if batch.t > positions {
        return Err(crate::Error::Input(format!(
            "sequences of {} tokens are longer than the model's {positions} positions; truncate the input",
            batch.t
        )));
    }
    if let Some(&id) = batch.input_ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(crate::Error::Input(format!(
            "token id {id} is outside the vocabulary of {vocab}; tokenizer and model do not match"
        )));
    }
    if let Some(&ty) = batch.token_type_ids.iter().find(|&&ty| ty as usize >= types) {
        return Err(crate::Error::Input(format!("token type id {ty} is outside the model's {types} token types")));
    }
    Ok(())
}
