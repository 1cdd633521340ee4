//! One optimiser step of a [`FineTuner`]: micro-batches' gradients accumulated, clipped by their global norm, then
//! [`AdamW`] (no weight decay where the parameter says so); and the trained state on the host, for early stopping's
//! best epoch and for checkpoints.

use super::fit::checkpoint::TraineeState;
use super::fit::StepReport;
use super::finetune::{FineTuner, OwnedTargets, PendingLoss, Targets};
use super::optim::{AdamW, StepOptions};
use super::metrics::{PretrainEval, PretrainStep};
use crate::backend::{AdamWStep, Backend};
use crate::tokenizer::Batch;
use crate::{Error, Result};

impl<B: Backend> FineTuner<B> {
    /// One optimiser step on a batch: forward, backward, clipping, AdamW ([`Self::accumulate`] then
    /// [`Self::apply`]). See [`Self::apply`] for what is read back.
    pub async fn step(&mut self, be: &B, batch: &Batch, targets: &Targets<'_>, opt: &StepOptions) -> Result<StepReport> {
        self.accumulate(be, batch, targets).await?;
        self.apply(be, opt).await
    }

    /// Adds a micro-batch's gradients to the step being accumulated (gradient accumulation: a step over more rows
    /// than fit at once). [`Self::apply`] updates with their mean, as transformers' `gradient_accumulation_steps`
    /// (each micro-batch's loss divided by their number) does, and reports their mean loss.
    /// With dropout on ([`Self::set_dropout`]), each micro-batch's forward drops with masks of its own.
    pub async fn accumulate(&mut self, be: &B, batch: &Batch, targets: &Targets<'_>) -> Result<()> {
        let plan = self.dropout.map(|d| d.plan(self.micro_batches));
        self.micro_batches += 1;
        let (grads, loss) = match targets {
            Targets::Embedding { positives } => {
                let (grads, loss) = self.embedding_gradients_with(be, batch, positives, plan).await?;
                (grads, PendingLoss::Known(loss))
            }
            Targets::Pretrain { mlm, nsp } => {
                let (grads, eval) = self.pretrain_gradients_with(be, batch, mlm, *nsp, plan).await?;
                (grads, PendingLoss::Pretrain(eval))
            }
            _ => {
                let (grads, logits) = self.gradients_with(be, batch, targets, plan)?;
                let targets = OwnedTargets::new(targets).ok_or_else(|| Error::Input("no loss for these targets".into()))?;
                (grads, PendingLoss::Logits { logits, t: batch.t, targets })
            }
        };
        self.pending = Some(match self.pending.take() {
            None => (grads, vec![loss]),
            Some((mut sum, mut losses)) => {
                // A parameter one micro-batch gave no gradient (a pre-training micro-batch that selected no token
                // gives none at all) takes the others' sum: its own is zero.
                for (s, g) in sum.iter_mut().zip(grads) {
                    *s = match (s.take(), g) {
                        (Some(prev), Some(g)) => Some(be.add(&prev, &g)?),
                        (prev, g) => prev.or(g),
                    };
                }
                losses.push(loss);
                (sum, losses)
            }
        });
        Ok(())
    }

    /// Updates the parameters with the mean of the accumulated gradients: clipping by their global norm, then AdamW.
    /// The report's loss is the micro-batches' mean (and pre-training's metrics are over them all: [`PretrainStep`]).
    ///
    /// The norm, the clipping and the check that the step is finite all happen on the backend, in AdamW's kernel,
    /// so the whole step (forward, backward, update) is queued before anything is read: then one wait reads the
    /// norm and the logits the loss is computed from. A non-finite loss or gradient is an error, and leaves the
    /// parameters and AdamW's state as they were (the kernel updates nothing where the norm is not finite; a
    /// non-finite logit makes the gradients non-finite through the softmax).
    pub async fn apply(&mut self, be: &B, opt: &StepOptions) -> Result<StepReport> {
        let (grads, losses) =
            self.pending.take().ok_or_else(|| Error::Input("no gradients to apply: accumulate a batch first".into()))?;
        let n = losses.len();
        // The squared norm over the trained parameters (clip_grad_norm_ skips those without a gradient).
        let trained: Vec<&B::Tensor> = grads.iter().flatten().collect();
        let evals: Vec<PretrainEval> =
            losses.iter().filter_map(|l| if let PendingLoss::Pretrain(e) = l { Some(*e) } else { None }).collect();
        if trained.is_empty() && evals.len() == n && evals.iter().all(|e| e.mlm_count == 0 && e.nsp_count == 0) {
            // Pre-training micro-batches that selected no token for the masked LM and have no NSP labels: no loss, no
            // gradient, so no update (as PyTorch's AdamW skips parameters without a gradient; AdamW's step count
            // stays).
            return Ok(StepReport { loss: 0.0, grad_norm: 0.0, pretrain: PretrainStep::of(&evals) });
        }
        if trained.is_empty() {
            return Err(Error::Input("no parameter is being trained".into()));
        }
        let total = be.sum_squares_all(&trained)?;
        let t = self.adamw.begin_step();
        let params = &mut self.encoder.params;
        for (i, g) in grads.iter().enumerate() {
            let Some(g) = g else { continue }; // frozen
            let wd = if params[i].decay { opt.weight_decay } else { 0.0 };
            let mut s = AdamWStep::new(opt.learning_rate, wd, opt.beta1, opt.beta2, opt.eps, t);
            s.grad_scale = 1.0 / n as f32; // the sum becomes a mean
            s.max_grad_norm = opt.max_grad_norm;
            let shape = (params[i].rows, params[i].cols);
            params[i].tensor = self.adamw.update(be, i, params.len(), &params[i].tensor, shape, g, &s, Some(&total))?;
        }
        let mut reads = vec![&total];
        reads.extend(losses.iter().filter_map(|l| match l {
            PendingLoss::Logits { logits, .. } => Some(logits),
            PendingLoss::Known(_) | PendingLoss::Pretrain(_) => None,
        }));
        let values = be.read_many(&reads).await?;
        let mut logits = values[1..].iter();
        let mut sum = 0f64;
        for l in &losses {
            sum += match l {
                PendingLoss::Known(x) => *x as f64,
                PendingLoss::Pretrain(e) => e.loss() as f64,
                PendingLoss::Logits { t, targets, .. } => {
                    let z = logits.next().ok_or_else(|| Error::Input("a micro-batch's logits were not read".into()))?;
                    self.loss(z, *t, &targets.targets()) as f64
                }
            };
        }
        let loss = (sum / n as f64) as f32;
        let grad_norm = ((values[0][0] as f64).sqrt() / n as f64) as f32; // of the mean gradient
        if !loss.is_finite() || !grad_norm.is_finite() {
            self.adamw.undo_step(); // nothing was updated
            return Err(Error::Input(format!(
                "the loss ({loss}) or the gradient norm ({grad_norm}) is not finite; the model was left as it was \
                 before this step: lower the learning rate"
            )));
        }
        Ok(StepReport { loss, grad_norm, pretrain: PretrainStep::of(&evals) })
    }

    /// The parameters being trained (those with AdamW moments: every parameter updated so far) on the host, in
    /// parameter order.
    pub async fn read_trained(&self, be: &B) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::new();
        for (i, p) in self.encoder.params.iter().enumerate() {
            if self.adamw.moments(i).is_some() {
                out.push(be.read(&p.tensor).await?);
            }
        }
        Ok(out)
    }

    /// Puts back what [`Self::read_trained`] read (AdamW's state is kept).
    pub fn set_trained(&mut self, be: &B, saved: &[Vec<f32>]) -> Result<()> {
        let trained: Vec<usize> = (0..self.encoder.params.len()).filter(|&i| self.adamw.moments(i).is_some()).collect();
        if trained.len() != saved.len()
            || trained.iter().zip(saved).any(|(&i, v)| v.len() != self.encoder.params[i].rows * self.encoder.params[i].cols)
        {
            return Err(Error::Input("saved parameters do not match the parameters being trained".into()));
        }
        for (&i, v) in trained.iter().zip(saved) {
            let p = &mut self.encoder.params[i];
            p.tensor = be.input(v, p.rows, p.cols)?;
        }
        Ok(())
    }

    /// What a checkpoint holds of the fine-tuner ([`super::fit::checkpoint`]): every trained parameter with AdamW's two
    /// moments, under the parameter's first name, AdamW's step count, and the micro-batches dropout has seen.
    pub async fn train_state(&self, be: &B) -> Result<TraineeState> {
        if self.pending.is_some() {
            return Err(Error::Input("a checkpoint is taken between optimiser steps, not with gradients pending".into()));
        }
        let mut s = TraineeState::default();
        for (i, p) in self.encoder.params.iter().enumerate() {
            let Some((m, v)) = self.adamw.moments(i) else { continue };
            let shape = vec![p.rows, p.cols];
            for (kind, t) in [("param", &p.tensor), ("exp_avg", m), ("exp_avg_sq", v)] {
                s.tensors.push((format!("{kind}.{}", p.names[0]), shape.clone(), be.read(t).await?));
            }
        }
        s.counters.insert("adamw_steps".into(), self.adamw.steps() as u64);
        s.counters.insert("micro_batches".into(), self.micro_batches);
        Ok(s)
    }

    /// Puts back what [`Self::train_state`] saved, into a fine-tuner made as the saved one was (same model, task,
    /// layers, LoRA and seed). Every trained parameter must be there, of its shape.
    pub fn set_train_state(&mut self, be: &B, state: TraineeState) -> Result<()> {
        let mut by_name: std::collections::HashMap<String, (Vec<usize>, Vec<f32>)> =
            state.tensors.into_iter().map(|(n, shape, v)| (n, (shape, v))).collect();
        let counter = |k: &str| state.counters.get(k).copied().ok_or_else(|| Error::Input(format!("the checkpoint has no `{k}`")));
        let steps = u32::try_from(counter("adamw_steps")?)
            .map_err(|_| Error::Input("the checkpoint's step count is out of range".into()))?;
        let micro_batches = counter("micro_batches")?;
        let mut moments = Vec::with_capacity(self.encoder.params.len());
        let mut restored = Vec::new();
        for p in &self.encoder.params {
            let mut take = |kind: &str| -> Option<Result<B::Tensor>> {
                let (shape, v) = by_name.remove(&format!("{kind}.{}", p.names[0]))?;
                Some(if shape != [p.rows, p.cols] || v.len() != p.rows * p.cols {
                    Err(Error::Input(format!("the checkpoint's {kind} of {} is {shape:?}, the model's {}×{}", p.names[0], p.rows, p.cols)))
                } else {
                    be.input(&v, p.rows, p.cols)
                })
            };
            match (take("param"), take("exp_avg"), take("exp_avg_sq")) {
                (Some(w), Some(m), Some(v)) => {
                    restored.push(Some(w?));
                    moments.push(Some((m?, v?)));
                }
                (None, None, None) => {
                    restored.push(None);
                    moments.push(None);
                }
                _ => return Err(Error::Input(format!("the checkpoint has part of {}'s state", p.names[0]))),
            }
        }
        if let Some(extra) = by_name.keys().next() {
            return Err(Error::Input(format!("the checkpoint trains {extra}, which this model has not: another model or options")));
        }
        for (p, w) in self.encoder.params.iter_mut().zip(restored) {
            if let Some(w) = w {
                p.tensor = w;
            }
        }
        self.adamw = AdamW::from_state(moments, steps);
        self.micro_batches = micro_batches;
        Ok(())
    }
}
