//! Host side of `shaders/layernorm.wgsl` (LayerNorm with an optional fused residual add) and
//! `shaders/embeddings.wgsl` (three table lookups, f32 or packed, summed, then LayerNorm).

use super::params::{EmbeddingsParams, LayerNormParams};
use super::tensor::expect_f32;
use super::{shape_err, Dtype, EmbeddingTables, GpuBackend, GpuTensor};
use crate::backend::validate_embeddings_input;
use crate::tokenizer::Batch;
use crate::weights::quant::QK;
use crate::Result;

impl GpuBackend {
    /// [`Backend::embeddings`](super::Backend::embeddings): three table lookups summed, then LayerNorm.
    pub(super) fn record_embeddings(&self, batch: &Batch, tables: &EmbeddingTables<'_, GpuTensor>) -> Result<GpuTensor> {
        let n = batch.b * batch.t;
        let (vocab, h) = (tables.word.rows, tables.word.cols);
        validate_embeddings_input(batch, vocab, tables.position.rows, tables.token_type.rows)?;
        if n == 0 {
            return Err(shape_err("embeddings", format!("the batch of {}×{} holds no tokens", batch.b, batch.t)));
        }
        let check = |name: &str, t: &GpuTensor, rows: Option<usize>| {
            if t.cols != h || rows.is_some_and(|r| t.rows != r) {
                return Err(shape_err("embeddings", format!("{name} is ({}, {}), hidden size is {h}", t.rows, t.cols)));
            }
            Ok(())
        };
        check("position table", tables.position, None)?;
        check("token type table", tables.token_type, None)?;
        check("LayerNorm gamma", tables.ln_gamma, Some(1))?;
        check("LayerNorm beta", tables.ln_beta, Some(1))?;
        expect_f32("embeddings LayerNorm", &[tables.ln_gamma, tables.ln_beta])?;
        for (name, t) in [("word", tables.word), ("position", tables.position), ("token type", tables.token_type)] {
            if matches!(t.dtype, Dtype::Q8_0 | Dtype::Q4_0) && h % QK != 0 {
                return Err(shape_err("embeddings", format!("{name} table is {} with rows of {h}, not whole blocks", t.dtype.name())));
            }
        }
        let mut ids = Vec::with_capacity(2 * n); // (2, B*T): token ids, then token type ids
        ids.extend_from_slice(&batch.input_ids);
        ids.extend_from_slice(&batch.token_type_ids);
        let ids = self.host_buffer(bytemuck::cast_slice(&ids))?;
        let out = self.alloc(n, h)?;
        let p = EmbeddingsParams { rows: n as u32, seq: batch.t as u32, hidden: h as u32, eps: tables.eps };
        let consts = [
            ("WG", self.tuning.row_wg as f64),
            ("WORD_DT", tables.word.dtype.shader_code() as f64),
            ("POS_DT", tables.position.dtype.shader_code() as f64),
            ("TYPE_DT", tables.token_type.dtype.shader_code() as f64),
        ];
        self.dispatch("embeddings", "embeddings", &consts, bytemuck::bytes_of(&p), &[
            (1, ids.buffer(), false),
            (2, tables.word.buffer(), false),
            (3, tables.position.buffer(), false),
            (4, tables.token_type.buffer(), false),
            (5, tables.ln_gamma.buffer(), false),
            (6, tables.ln_beta.buffer(), false),
            (7, out.buffer(), true),
        ], self.grid(n))?;
        Ok(out)
    }

    /// [`Backend::layernorm`](super::Backend::layernorm), with the residual add fused.
    pub(super) fn record_layernorm(&self, x: &GpuTensor, residual: Option<&GpuTensor>, gamma: &GpuTensor, beta: &GpuTensor, eps: f32)
        -> Result<GpuTensor> {
        let (m, n) = (x.rows, x.cols);
        expect_f32("layernorm", &[x, gamma, beta])?;
        if let Some(r) = residual {
            expect_f32("layernorm residual", &[r])?;
            if (r.rows, r.cols) != (m, n) {
                return Err(shape_err("layernorm", format!("residual is ({}, {}), x is ({m}, {n})", r.rows, r.cols)));
            }
        }
        if gamma.len() != n || beta.len() != n {
            return Err(shape_err("layernorm", format!("gamma/beta have {}/{} values for rows of {n}", gamma.len(), beta.len())));
        }
        let out = self.alloc(m, n)?;
        let p = LayerNormParams { rows: m as u32, cols: n as u32, eps, _pad: 0 };
        let consts = [("WG", self.tuning.row_wg as f64), ("HAS_RES", if residual.is_some() { 1.0 } else { 0.0 })];
        let res = residual.map(|r| r.buffer()).unwrap_or(&self.dummy);
        self.dispatch("layernorm", "layernorm", &consts, bytemuck::bytes_of(&p), &[
            (1, x.buffer(), false),
            (2, res, false),
            (3, gamma.buffer(), false),
            (4, beta.buffer(), false),
            (5, out.buffer(), true),
        ], self.grid(m))?;
        Ok(out)
    }
}
