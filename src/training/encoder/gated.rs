//! A gated feed-forward's up-projection read with its halves swapped: ModernBERT's `Wi` (`[input; gate]`, the
//! activation on `input`; [`super::modern`]) and JinaBERT's `mlp.gated_layers` (`[gated; non_gated]`, the activation on
//! `gated`; [`super::jina`]). `Backend::glu` computes `up ⊙ act(gate)` of `[up | gate]`, the activation on the SECOND
//! half, so both forwards read the weight with its halves swapped and `glu` gives the checkpoint's product.
//!
//! # The math
//!
//! W `(2I, H)` as stored, x `(R, H)` the layer's input:
//! ```text
//! W' = swap(W)  (2I, H)        b' = b·P  (1, 2I)        u' = x·W'ᵀ + b'  (R, 2I)
//! ```
//! `swap` is a row gather (`Backend::gather_rows` by [`swap_halves`]), its own inverse; a bias is one row, which
//! `gather_rows` cannot permute, so it goes through P, the swap's `(2I, 2I)` permutation matrix (ModernBERT with
//! `mlp_bias`; JinaBERT's `gated_layers` has no bias). The forward hands `W'` back for the backward to keep, so each
//! step gathers it once. Backward from `du'` `(R, 2I)`: `dW = swap(du'ᵀ·x)`, `db = db'·Pᵀ` (`db' = Σ_rows du'`),
//! `dx = du'·W'`.
//!
//! A LoRA adapter on W (peft's, on the module in its own order, B `(2I, r)`) adds `s·(x·Aᵀ)·B'ᵀ` to `u'`, with
//! `B' = swap(B)` ([`super::super::lora::Adapter`]'s `perm`), and its gradient is `dB = swap(dB')`.

use super::Encoder;
use crate::backend::{Activation, Backend};
use crate::training::params::put;
use crate::Result;

/// `[n, …, 2n − 1, 0, …, n − 1]`: the rows of a `(2n, ·)` matrix with its halves swapped (its own inverse).
pub(crate) fn swap_halves(n: usize) -> Vec<u32> {
    (0..2 * n).map(|i| ((i + n) % (2 * n)) as u32).collect()
}

/// The row order that swaps the halves of a `(2I, H)` up-projection.
pub(super) struct SwappedUp {
    rows: Vec<u32>,
}

impl SwappedUp {
    /// For an intermediate size I.
    pub(super) fn new(inter: usize) -> SwappedUp {
        SwappedUp { rows: swap_halves(inter) }
    }

    /// P `(2I, 2I)`, the swap's permutation matrix: `b' = b·P` for a bias `b` `(1, 2I)`.
    pub(super) fn permutation<B: Backend>(&self, be: &B) -> Result<B::Tensor> {
        let n = self.rows.len();
        let mut p = vec![0f32; n * n];
        self.rows.iter().enumerate().for_each(|(j, &i)| p[i as usize * n + j] = 1.0);
        be.input(&p, n, n)
    }

    /// `u' = x·W'ᵀ + b'` `(R, 2I)` of weight `w` `(2I, H)` and, where it has one, bias `b` `(1, 2I)` with its P
    /// ([`Self::permutation`]); with a LoRA adapter on `w`, its update too. Returns `u'` and `W'`, which
    /// [`Self::backward`] reads.
    pub(super) fn forward<B: Backend<Tensor = T>, T>(&self, be: &B, enc: &Encoder<T>, x: &T, w: usize,
        bias: Option<(usize, &T)>) -> Result<(T, T)> {
        let ws = be.gather_rows(enc.t(w), &self.rows)?; // (2I, H), halves swapped
        let bs = bias.map(|(b, p)| be.matmul(enc.t(b), false, p, false)).transpose()?; // (1, 2I), halves swapped
        let u = be.linear(x, &ws, bs.as_ref(), Activation::None)?; // (R, 2I)
        let u = match &enc.lora {
            Some(lo) => lo.forward(be, &enc.params, x, w, u)?, // its B's rows swapped likewise
            None => u,
        };
        Ok((u, ws))
    }

    /// Back through [`Self::forward`] from `du'` `(R, 2I)`, with its input `x` and the `W'` it returned: the
    /// gradients of `w`, the bias (and LoRA's) into `grads`; returns `dx` `(R, H)`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward<B: Backend<Tensor = T>, T>(&self, be: &B, enc: &Encoder<T>, du: &T, x: &T, w: usize,
        swapped: &T, bias: Option<(usize, &T)>, grads: &mut [Option<T>]) -> Result<T> {
        if enc.trains(w) {
            let dws = be.matmul(du, true, x, false)?; // (2I, H), halves swapped
            put(be, grads, w, be.gather_rows(&dws, &self.rows)?)?;
        }
        if let Some((b, p)) = bias.filter(|&(b, _)| enc.trains(b)) {
            put(be, grads, b, be.matmul(&be.sum_rows(du)?, false, p, true)?)?; // db = db'·Pᵀ
        }
        let dx = be.matmul(du, false, swapped, false)?; // (R, 2I)·(2I, H)
        match enc.lora.as_ref().map(|lo| lo.backward(be, &enc.params, du, x, w, grads)).transpose()?.flatten() {
            Some(d) => be.add(&dx, &d),
            None => Ok(dx),
        }
    }
}
