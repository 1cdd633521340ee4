//! Host side of `shaders/attention.wgsl`, `attention_vec4.wgsl` and `attention_split.wgsl`: multi-head
//! self-attention over a padded batch, and the mask it reads; and of its backward, `shaders/attention_backward.wgsl`.

use super::params::AttentionParams;
use super::tensor::{expect_activation, expect_f32};
use super::tuning::split_subgroup_fits;
use super::{shape_err, AttentionKernel, AttentionShape, Backend, GpuBackend, GpuTensor};
use crate::backend::{Dropout, ScoreBias};
use crate::tokenizer::Batch;
use crate::Result;

/// Largest head_dim the attention kernel holds per invocation (`DMAX` in shaders/lib/attention.wgsl).
const ATTENTION_MAX_HEAD_DIM: usize = 128;

impl GpuBackend {
    /// [`Backend::mask`](super::Backend::mask): the `(B, T)` mask of a batch, 1.0 for real tokens.
    pub(super) fn attention_mask(&self, batch: &Batch) -> Result<GpuTensor> {
        if batch.attention_mask.len() != batch.b * batch.t {
            return Err(shape_err("mask", format!(
                "batch of {}×{} has {} mask values", batch.b, batch.t, batch.attention_mask.len()
            )));
        }
        let m: Vec<f32> = batch.attention_mask.iter().map(|&v| if v != 0 { 1.0 } else { 0.0 }).collect();
        self.input(&m, batch.b, batch.t)
    }

    /// [`Backend::attention`](super::Backend::attention): the vec4 kernel where head_dim allows it. With `dropout`
    /// ([`Backend::attention_dropout`](super::Backend::attention_dropout)), the same kernel compiled with
    /// `DROPOUT = 1`: a pipeline of its own, so the inference pipelines stay as they were.
    /// With `bias` ([`Backend::attention_biased`](super::Backend::attention_biased): `(heads, 2T − 1)`), the same
    /// kernel compiled with `BIAS = 1` (shaders/lib/attention_bias.wgsl); without, the mask stands in at its binding.
    /// With DeBERTa's disentangled terms ([`Backend::attention_disentangled`](super::Backend::attention_disentangled)),
    /// the kernel the tuning chose compiled with `DISENTANGLED = 1` (shaders/lib/attention_disentangled.wgsl: `rows`
    /// at binding 4, `pos` at 5), per-query or split alike.
    pub(super) fn record_attention(&self, qkv: &GpuTensor, mask: &GpuTensor, score_bias: ScoreBias<'_, GpuTensor>,
        s: AttentionShape, dropout: Option<Dropout>) -> Result<GpuTensor> {
        if let Some(d) = dropout {
            d.check()?;
        }
        let (bias, disentangled) = match score_bias {
            ScoreBias::None => (None, None),
            ScoreBias::Relative(b) => (Some(b), None),
            ScoreBias::Disentangled { pos, rows } => (None, Some((pos, rows))),
        };
        let widened_pos;
        let disentangled = match disentangled {
            Some((pos, rows)) => {
                let h = s.heads * s.head_dim;
                expect_f32("attention rows", &[rows])?;
                if (rows.rows, rows.cols) != (1, (2 * s.seq).saturating_sub(1)) || pos.cols != 3 * h || pos.rows == 0 {
                    return Err(shape_err("attention", format!(
                        "disentangled rows ({}, {}) / pos ({}, {}), expected (1, 2T - 1) = (1, {}) / (R, 3H) = (R, {})",
                        rows.rows, rows.cols, pos.rows, pos.cols, (2 * s.seq).saturating_sub(1), 3 * h
                    )));
                }
                // The kernel reads pos as f32 (f16 activations write the projection as f16 pairs).
                widened_pos = if pos.dtype == super::Dtype::F16 { Some(self.f32_of("attention pos", pos)?) } else { None };
                Some((widened_pos.as_ref().unwrap_or(pos), rows))
            }
            None => None,
        };
        if let Some(b) = bias {
            expect_f32("attention bias", &[b])?;
            if (b.rows, b.cols) != (s.heads, (2 * s.seq).saturating_sub(1)) {
                return Err(shape_err("attention", format!(
                    "bias is ({}, {}), expected (heads, 2T - 1) = ({}, {})", b.rows, b.cols, s.heads,
                    (2 * s.seq).saturating_sub(1)
                )));
            }
        }
        let h = s.heads * s.head_dim;
        expect_f32("attention", &[mask])?;
        expect_activation("attention", &[qkv])?;
        if (qkv.rows, qkv.cols) != (s.batch * s.seq, 3 * h) {
            return Err(shape_err("attention", format!(
                "qkv is ({}, {}), expected ({}, {}) for {s:?}", qkv.rows, qkv.cols, s.batch * s.seq, 3 * h
            )));
        }
        if (mask.rows, mask.cols) != (s.batch, s.seq) {
            return Err(shape_err("attention", format!("mask is ({}, {}), expected ({}, {})", mask.rows, mask.cols, s.batch, s.seq)));
        }
        if s.head_dim == 0 || s.head_dim > ATTENTION_MAX_HEAD_DIM || s.seq == 0 {
            return Err(shape_err("attention", format!(
                "head_dim {} (supported: 1..={ATTENTION_MAX_HEAD_DIM}) / seq {} not supported", s.head_dim, s.seq
            )));
        }
        let p = attention_params(s, dropout);
        // A vec4 kernel when head_dim and hidden split into vec4s (every BERT; with head_dim 32 or 64 fixed in the
        // kernel, or each query split over head_dim/4 invocations, where the tuning says so); the scalar one
        // otherwise. The split kernel runs WG / (head_dim/4) queries a workgroup (and needs WG ≥ head_dim/4).
        let t = self.tuning.get();
        let (mut shader, mut entry) = t.attention.kernel(s.head_dim);
        if shader == "attention_split_sg" && !split_subgroup_fits(&self.gpu.info, s.head_dim) {
            shader = "attention_split";
        }
        let wg_queries = if entry == "attention_split" {
            let lanes = s.head_dim / 4;
            if (t.attention_wg as usize) < lanes {
                (shader, entry) = AttentionKernel::Vec4.kernel(s.head_dim);
                t.attention_wg as usize
            } else {
                t.attention_wg as usize / lanes
            }
        } else {
            t.attention_wg as usize
        };
        let groups = (s.seq.div_ceil(wg_queries) as u32, s.heads as u32, s.batch as u32);
        // f16 activations (the f16 mode): the vec4 kernels read and write them as pairs; the scalar kernel (head_dim
        // not a multiple of 4) reads them widened. Dropout is training's, which the mode refuses.
        let half = match (qkv.dtype == super::Dtype::F16, super::params::half_module(shader, true)) {
            (true, Some(h)) if dropout.is_none() => Some(h),
            _ => None,
        };
        let widened;
        let qkv = match half {
            None if qkv.dtype == super::Dtype::F16 => {
                widened = self.f32_of("attention", qkv)?;
                &widened
            }
            _ => qkv,
        };
        let shader = half.unwrap_or(shader);
        let out = self.alloc_as(s.batch * s.seq, h, half.is_some())?;
        let wg = ("WG", t.attention_wg as f64);
        let consts: &[(&str, f64)] = match (dropout.is_some(), bias.is_some(), disentangled.is_some()) {
            (true, true, _) => &[wg, ("DROPOUT", 1.0), ("BIAS", 1.0)],
            (true, false, true) => &[wg, ("DROPOUT", 1.0), ("DISENTANGLED", 1.0)],
            (true, false, false) => &[wg, ("DROPOUT", 1.0)],
            (false, true, _) => &[wg, ("BIAS", 1.0)],
            (false, false, true) => &[wg, ("DISENTANGLED", 1.0)],
            (false, false, false) => &[wg],
        };
        let mut p = p;
        if disentangled.is_some() {
            p.scale = 1.0 / (3.0 * s.head_dim as f32).sqrt(); // transformers' 1/√(d·scale_factor), c2p and p2c both
        }
        let table = disentangled.map_or(bias.unwrap_or(mask), |(_, rows)| rows);
        let pos = disentangled.map_or(mask, |(pos, _)| pos);
        let bindings = [(1, qkv.buffer(), false), (2, mask.buffer(), false), (3, out.buffer(), true),
            (4, table.buffer(), false), (5, pos.buffer(), false)];
        self.dispatch(shader, entry, consts, bytemuck::bytes_of(&p), &bindings, groups)?;
        Ok(out)
    }

    /// [`Backend::attention_backward_biased`](super::Backend::attention_backward_biased): four passes (scores,
    /// softmax, per query row, per key row) through scratch copies of P and dS, `(B*heads*T, T)` each; with `bias`,
    /// the pipelines compiled with `BIAS = 1`, and with `want_dbias` a fifth pass summing dS by offset.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_attention_backward(&self, dctx: &GpuTensor, qkv: &GpuTensor, mask: &GpuTensor,
        bias: Option<&GpuTensor>, s: AttentionShape, dropout: Option<Dropout>, want_dbias: bool)
        -> Result<(GpuTensor, Option<GpuTensor>)> {
        self.record_attention_backward_scores(dctx, qkv, mask, bias.map_or(ScoreBias::None, ScoreBias::Relative), s,
            dropout, want_dbias)
    }

    /// [`Backend::attention_backward_disentangled`](super::Backend::attention_backward_disentangled): the passes of
    /// [`Self::record_attention_backward`] compiled with `DISENTANGLED = 1` (`rows` at binding 7, `pos` at 9), then
    /// `attn_bwd_pos` (per offset) and `attn_bwd_pos_rows` (per row of the table) for `dpos` `(R, 3H)`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_attention_backward_disentangled(&self, dctx: &GpuTensor, qkv: &GpuTensor, mask: &GpuTensor,
        pos: &GpuTensor, rows: &GpuTensor, s: AttentionShape, dropout: Option<Dropout>) -> Result<(GpuTensor, GpuTensor)> {
        let (dqkv, dpos) = self.record_attention_backward_scores(dctx, qkv, mask, ScoreBias::Disentangled { pos, rows }, s,
            dropout, true)?;
        Ok((dqkv, dpos.ok_or_else(|| shape_err("attention_backward", "no dpos".into()))?))
    }

    /// The backward's passes for any [`ScoreBias`]; the second result is the relative bias's gradient (`want_grad`)
    /// or the disentangled table's (always).
    #[allow(clippy::too_many_arguments)]
    fn record_attention_backward_scores(&self, dctx: &GpuTensor, qkv: &GpuTensor, mask: &GpuTensor,
        score_bias: ScoreBias<'_, GpuTensor>, s: AttentionShape, dropout: Option<Dropout>, want_dbias: bool)
        -> Result<(GpuTensor, Option<GpuTensor>)> {
        let (bias, disentangled) = match score_bias {
            ScoreBias::None => (None, None),
            ScoreBias::Relative(b) => (Some(b), None),
            ScoreBias::Disentangled { pos, rows } => (None, Some((pos, rows))),
        };
        let dropout = dropout.filter(Dropout::is_active);
        if let Some(d) = dropout {
            d.check()?;
        }
        let h = s.heads * s.head_dim;
        expect_f32("attention_backward", &[dctx, qkv, mask])?;
        if s.heads == 0 || s.head_dim == 0 || s.head_dim > ATTENTION_MAX_HEAD_DIM {
            return Err(shape_err("attention_backward", format!(
                "head_dim {} (supported: 1..={ATTENTION_MAX_HEAD_DIM}) with {} heads not supported", s.head_dim, s.heads
            )));
        }
        let rows = s.batch * s.seq;
        for (what, t, want) in [("qkv", qkv, (rows, 3 * h)), ("dctx", dctx, (rows, h)), ("mask", mask, (s.batch, s.seq))] {
            if (t.rows, t.cols) != want {
                return Err(shape_err("attention_backward", format!(
                    "{what} is ({}, {}), expected {want:?} for {s:?}", t.rows, t.cols
                )));
            }
        }
        let width = (2 * s.seq).saturating_sub(1);
        if let Some(b) = bias {
            expect_f32("attention_backward bias", &[b])?;
            if (b.rows, b.cols) != (s.heads, width) {
                return Err(shape_err("attention_backward", format!(
                    "bias is ({}, {}), expected (heads, 2T - 1) = ({}, {width})", b.rows, b.cols, s.heads
                )));
            }
        }
        if let Some((pos, index)) = disentangled {
            expect_f32("attention_backward pos/rows", &[pos, index])?;
            if (index.rows, index.cols) != (1, width) || pos.cols != 3 * h || pos.rows == 0 {
                return Err(shape_err("attention_backward", format!(
                    "disentangled rows ({}, {}) / pos ({}, {}), expected (1, 2T - 1) = (1, {width}) / (R, 3H) = (R, {})",
                    index.rows, index.cols, pos.rows, pos.cols, 3 * h
                )));
            }
        }
        let want_dbias = want_dbias && bias.is_some();
        let out = self.alloc(rows, 3 * h)?;
        if rows == 0 {
            let zeros = want_dbias.then(|| self.input(&vec![0.0; s.heads * width], s.heads, width)).transpose()?;
            let dpos = disentangled.map(|(pos, _)| self.input(&vec![0.0; pos.rows * 3 * h], pos.rows, 3 * h)).transpose()?;
            return Ok((out, zeros.or(dpos)));
        }
        let dbias = if want_dbias { Some(self.alloc(s.heads, width)?) } else { None };
        let (probs, dscores) = (self.alloc(rows * s.heads, s.seq)?, self.alloc(rows * s.heads, s.seq)?);
        let mut p = attention_params(s, dropout);
        if let Some((pos, _)) = disentangled {
            p.scale = 1.0 / (3.0 * s.head_dim as f32).sqrt(); // as the forward: 1/√(d·scale_factor)
            p.pos_rows = pos.rows as u32;
        }
        let wg = self.tuning.get().attention_wg;
        let wgc = ("WG", wg as f64);
        let consts: &[(&str, f64)] = match (dropout.is_some(), bias.is_some(), disentangled.is_some()) {
            (true, true, _) => &[wgc, ("DROPOUT", 1.0), ("BIAS", 1.0)],
            (true, false, true) => &[wgc, ("DROPOUT", 1.0), ("DISENTANGLED", 1.0)],
            (true, false, false) => &[wgc, ("DROPOUT", 1.0)],
            (false, true, _) => &[wgc, ("BIAS", 1.0)],
            (false, false, true) => &[wgc, ("DISENTANGLED", 1.0)],
            (false, false, false) => &[wgc],
        };
        let table = disentangled.map_or(bias.unwrap_or(mask), |(_, index)| index);
        let pos = disentangled.map_or(mask, |(pos, _)| pos);
        // Invocations per (sequence, head): one per (query, key), per query, per (query, column), per (key, column).
        let (t, d) = (s.seq, s.head_dim);
        for (entry, n) in [("attn_bwd_scores", t * t), ("attn_bwd_softmax", t), ("attn_bwd_queries", t * d), ("attn_bwd_keys", t * d)] {
            let groups = (n.div_ceil(wg as usize) as u32, s.heads as u32, s.batch as u32);
            self.dispatch("attention_backward", entry, consts, bytemuck::bytes_of(&p), &[
                (1, qkv.buffer(), false),
                (2, mask.buffer(), false),
                (3, dctx.buffer(), false),
                (4, out.buffer(), true),
                (5, probs.buffer(), true),
                (6, dscores.buffer(), true),
                (7, table.buffer(), false),
                (9, pos.buffer(), false),
            ], groups)?;
        }
        if let Some((pos, index)) = disentangled {
            let dpos = self.alloc(pos.rows, 3 * h)?;
            // Per offset (a workgroup per (columns, offset)): [dposQ | dposK] (2T − 1, 2H); then per row of the table
            // (a workgroup per (columns, row)) the sum of its offsets'.
            let part = self.alloc(width, 2 * h)?;
            self.dispatch("attention_backward", "attn_bwd_pos", consts, bytemuck::bytes_of(&p), &[
                (1, qkv.buffer(), false),
                (6, dscores.buffer(), true),
                (11, part.buffer(), true),
            ], (h.div_ceil(wg as usize) as u32, width as u32, 1))?;
            self.dispatch("attention_backward", "attn_bwd_pos_rows", consts, bytemuck::bytes_of(&p), &[
                (7, index.buffer(), false),
                (10, dpos.buffer(), true),
                (11, part.buffer(), true),
            ], ((2 * h).div_ceil(wg as usize) as u32, pos.rows as u32, 1))?;
            return Ok((out, Some(dpos)));
        }
        if let Some(db) = &dbias {
            let groups = (width.div_ceil(wg as usize) as u32, s.heads as u32, 1);
            self.dispatch("attention_backward", "attn_bwd_bias", consts, bytemuck::bytes_of(&p), &[
                (6, dscores.buffer(), true),
                (8, db.buffer(), true),
            ], groups)?;
        }
        Ok((out, dbias))
    }
}

/// The uniform of both attention kernels (forward and backward) for a shape, and the dropout of its probabilities.
fn attention_params(s: AttentionShape, dropout: Option<Dropout>) -> AttentionParams {
    let (drop_threshold, drop_key, drop_scale) = dropout.map_or((0, 0, 1.0), |d| (d.threshold(), d.key(), d.scale()));
    AttentionParams {
        batch: s.batch as u32,
        seq: s.seq as u32,
        heads: s.heads as u32,
        head_dim: s.head_dim as u32,
        hidden: (s.heads * s.head_dim) as u32,
        scale: 1.0 / (s.head_dim as f32).sqrt(),
        drop_threshold,
        drop_key,
        drop_scale,
        ..Default::default()
    }
}
