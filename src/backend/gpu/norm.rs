//! Host side of `shaders/layernorm.wgsl` (LayerNorm with an optional fused residual add),
//! `shaders/embeddings.wgsl` (three table lookups, f32 or packed, summed, then LayerNorm, or not), and their
//! backward: `shaders/layernorm_backward.wgsl`, and the embedding tables' scatter-add (a gather over lists,
//! `shaders/backward.wgsl`, see `train.rs`).

use super::params::{self, EmbeddingsParams, LayerNormParams};
use super::train::{csr, COL_PART_ROWS};
use super::tensor::expect_f32;
use super::{shape_err, Dtype, EmbeddingTables, GpuBackend, GpuTensor};
use crate::backend::validate_embeddings_input;
use crate::tokenizer::Batch;
use crate::weights::quant::QK;
use crate::Result;

impl GpuBackend {
    /// [`Backend::embeddings`](super::Backend::embeddings): three table lookups summed, then LayerNorm.
    /// With `normalize` false, [`Backend::embeddings_sum`](super::Backend::embeddings_sum): the sum alone.
    pub(super) fn record_embeddings(&self, batch: &Batch, tables: &EmbeddingTables<'_, GpuTensor>, normalize: bool)
        -> Result<GpuTensor> {
        let op = if normalize { "embeddings" } else { "embeddings_sum" };
        let n = batch.b * batch.t;
        let (vocab, h) = (tables.word.rows, tables.word.cols);
        validate_embeddings_input(batch, vocab, tables.position.map_or(usize::MAX, |p| p.rows), tables.token_type.rows)?;
        if n == 0 {
            return Err(shape_err(op, format!("the batch of {}×{} holds no tokens", batch.b, batch.t)));
        }
        let check = |name: &str, t: &GpuTensor, rows: Option<usize>| {
            if t.cols != h || rows.is_some_and(|r| t.rows != r) {
                return Err(shape_err(op, format!("{name} is ({}, {}), hidden size is {h}", t.rows, t.cols)));
            }
            Ok(())
        };
        if let Some(position) = tables.position {
            check("position table", position, None)?;
        }
        check("token type table", tables.token_type, None)?;
        if normalize {
            check("LayerNorm gamma", tables.ln_gamma, Some(1))?;
            check("LayerNorm beta", tables.ln_beta, Some(1))?;
            expect_f32("embeddings LayerNorm", &[tables.ln_gamma, tables.ln_beta])?;
        }
        let tabled = [("word", Some(tables.word)), ("position", tables.position), ("token type", Some(tables.token_type))];
        for (name, t) in tabled.into_iter().filter_map(|(n, t)| Some((n, t?))) {
            if matches!(t.dtype, Dtype::Q8_0 | Dtype::Q4_0) && h % QK != 0 {
                return Err(shape_err(op, format!("{name} table is {} with rows of {h}, not whole blocks", t.dtype.name())));
            }
        }
        let mut ids = Vec::with_capacity(2 * n); // (2, B*T): token ids, then token type ids
        ids.extend_from_slice(&batch.input_ids);
        ids.extend_from_slice(&batch.token_type_ids);
        let ids = self.host_buffer(bytemuck::cast_slice(&ids))?;
        // The f16 mode writes the forward's embeddings as f16 (rows of whole words); the sum alone (training) stays f32.
        let half = normalize && self.f16_activations.get() && h % 2 == 0;
        let out = self.alloc_as(n, h, half)?;
        let p = EmbeddingsParams { rows: n as u32, seq: batch.t as u32, hidden: h as u32, eps: tables.eps };
        let mut consts = vec![
            ("WG", self.tuning.get().row_wg as f64),
            ("WORD_DT", tables.word.dtype.shader_code() as f64),
            ("POS_DT", tables.position.map_or(0, |p| p.dtype.shader_code()) as f64),
            ("TYPE_DT", tables.token_type.dtype.shader_code() as f64),
        ];
        // The forward keeps the pipeline it always had (NORMALIZE's default, true); the sum alone names it.
        if !normalize {
            consts.push(("NORMALIZE", 0.0));
        }
        // The rotary families have no position table: the models with one keep the pipeline they always had.
        if tables.position.is_none() {
            consts.push(("POSITIONS", 0.0));
        }
        let (gamma, beta) = if normalize {
            (tables.ln_gamma.buffer(), tables.ln_beta.buffer())
        } else {
            (&self.dummy, &self.dummy)
        };
        let shader = self.row_shader("embeddings");
        let shader = if half { params::half_module(shader, true).expect("embeddings has an f16 variant") } else { shader };
        self.dispatch(shader, "embeddings", &consts, bytemuck::bytes_of(&p), &[
            (1, ids.buffer(), false),
            (2, tables.word.buffer(), false),
            (3, tables.position.map_or(&self.dummy, |p| p.buffer()), false),
            (4, tables.token_type.buffer(), false),
            (5, gamma, false),
            (6, beta, false),
            (7, out.buffer(), true),
        ], self.grid(n))?;
        Ok(out)
    }

    /// [`Backend::embeddings_backward`](super::Backend::embeddings_backward): each table's gradient is a gather over
    /// the tokens that read each of its rows, in token order (lists built here, from the batch on the host).
    pub(super) fn record_embeddings_backward(&self, d: &GpuTensor, batch: &Batch, vocab: usize, positions: usize,
        types: usize, pad: Option<u32>) -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
        validate_embeddings_input(batch, vocab, positions, types)?;
        expect_f32("embeddings_backward", &[d])?;
        let n = batch.b * batch.t;
        if d.rows != n {
            return Err(shape_err("embeddings_backward", format!(
                "d has {} rows for a batch of {}×{} tokens", d.rows, batch.b, batch.t
            )));
        }
        let t = batch.t;
        // The word row `pad` gets nothing (nn.Embedding's padding_idx); positions and token types count every token.
        let word = csr(vocab, batch.input_ids.iter().map(|&id| (Some(id) != pad).then_some(id as usize)));
        let pos = csr(positions, (0..n).map(|r| Some(r % t)));
        let ty = csr(types, batch.token_type_ids.iter().map(|&ty| Some(ty as usize)));
        let mut grads = Vec::with_capacity(3);
        for (lists, rows) in [(word, vocab), (pos, positions), (ty, types)] {
            let lists = self.host_buffer(bytemuck::cast_slice(&lists))?;
            grads.push(self.gather_sum(d, &lists, rows)?);
        }
        let (dt, dp, dw) = (grads.pop(), grads.pop(), grads.pop());
        Ok((dw.expect("three tables"), dp.expect("three tables"), dt.expect("three tables")))
    }

    /// [`Backend::layernorm_backward`](super::Backend::layernorm_backward): dx and each row's (mean, rstd) one
    /// workgroup per row, then dγ and dβ one invocation per column of each part of [`COL_PART_ROWS`] rows, the parts
    /// then summed.
    pub(super) fn record_layernorm_backward(&self, dy: &GpuTensor, x: &GpuTensor, gamma: &GpuTensor, eps: f32)
        -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
        let (m, n) = (x.rows, x.cols);
        expect_f32("layernorm_backward", &[dy, x, gamma])?;
        if (dy.rows, dy.cols) != (m, n) {
            return Err(shape_err("layernorm_backward", format!("dy is ({}, {}), x is ({m}, {n})", dy.rows, dy.cols)));
        }
        if (gamma.rows, gamma.cols) != (1, n) {
            return Err(shape_err("layernorm_backward", format!(
                "gamma is ({}, {}) for rows of {n}", gamma.rows, gamma.cols
            )));
        }
        let (dx, stats) = (self.alloc(m, n)?, self.alloc(m, 2)?);
        let parts = m.div_ceil(COL_PART_ROWS).max(1);
        let (dgamma, dbeta) = (self.alloc(parts, n)?, self.alloc(parts, n)?);
        let p = LayerNormParams { rows: m as u32, cols: n as u32, eps, part_rows: COL_PART_ROWS as u32 };
        let wg = self.tuning.get().row_wg;
        self.dispatch(self.row_shader("layernorm_backward"), "ln_backward_dx", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, dy.buffer(), false),
            (2, x.buffer(), false),
            (3, gamma.buffer(), false),
            (4, dx.buffer(), true),
            (5, stats.buffer(), true),
        ], self.grid(m))?;
        let wg = self.tuning.get().elem_wg;
        self.dispatch("layernorm_backward", "ln_param_grads", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, dy.buffer(), false),
            (2, x.buffer(), false),
            (5, stats.buffer(), true),
            (6, dgamma.buffer(), true),
            (7, dbeta.buffer(), true),
        ], self.grid((parts * n).div_ceil(wg as usize)))?;
        if parts == 1 {
            return Ok((dx, dgamma, dbeta));
        }
        Ok((dx, self.record_sum_rows(&dgamma)?, self.record_sum_rows(&dbeta)?))
    }

    /// [`Backend::layernorm`](super::Backend::layernorm), with the residual add fused.
    pub(super) fn record_layernorm(&self, x: &GpuTensor, residual: Option<&GpuTensor>, gamma: &GpuTensor, beta: &GpuTensor, eps: f32)
        -> Result<GpuTensor> {
        let (m, n) = (x.rows, x.cols);
        expect_f32("layernorm", &[gamma, beta])?;
        if let Some(r) = residual {
            if (r.rows, r.cols) != (m, n) {
                return Err(shape_err("layernorm", format!("residual is ({}, {}), x is ({m}, {n})", r.rows, r.cols)));
            }
        }
        // The f16 kernel where x (and the residual) are f16 activations and rows are whole words; f32 otherwise,
        // an f16 input widened.
        let half = x.dtype == Dtype::F16 && residual.is_none_or(|r| r.dtype == Dtype::F16) && n % 2 == 0;
        let (x, residual) = if half {
            (x.clone(), residual.cloned())
        } else {
            (self.f32_of("layernorm", x)?, residual.map(|r| self.f32_of("layernorm residual", r)).transpose()?)
        };
        if gamma.len() != n || beta.len() != n {
            return Err(shape_err("layernorm", format!("gamma/beta have {}/{} values for rows of {n}", gamma.len(), beta.len())));
        }
        let out = self.alloc_as(m, n, half)?;
        let p = LayerNormParams { rows: m as u32, cols: n as u32, eps, part_rows: 0 };
        let consts = [("WG", self.tuning.get().row_wg as f64), ("HAS_RES", if residual.is_some() { 1.0 } else { 0.0 })];
        let res = residual.as_ref().map(|r| r.buffer()).unwrap_or(&self.dummy);
        let shader = self.row_shader("layernorm");
        let shader = if half { params::half_module(shader, true).expect("layernorm has an f16 variant") } else { shader };
        self.dispatch(shader, "layernorm", &consts, bytemuck::bytes_of(&p), &[
            (1, x.buffer(), false),
            (2, res, false),
            (3, gamma.buffer(), false),
            (4, beta.buffer(), false),
            (5, out.buffer(), true),
        ], self.grid(m))?;
        Ok(out)
    }
}
