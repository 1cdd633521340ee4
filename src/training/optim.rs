//! The optimiser: AdamW as `torch.optim.AdamW`, with its state, and nothing of any model. It owns, per parameter,
//! the two moments (made at the parameter's first update, so a frozen one never has any) and the count of steps
//! taken; the parameters and their gradients are lent to it one update at a time (as candle-nn's `AdamW` and
//! burn's optimizer records keep them apart from the module). The encoder's fine-tuner
//! ([`super::finetune::FineTuner`]) and trainHead's [`super::head::Trainer`] both step through it. The arithmetic is
//! the backend's kernel ([`AdamWStep`], `Backend::adamw`), which also clips by the global norm and refuses a
//! non-finite step.

use crate::backend::{AdamWStep, Backend};
use crate::Result;

/// AdamW's hyper-parameters (`torch.optim.AdamW` defaults but the learning rate): trainHead's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWOptions {
    pub lr: f32,
    pub weight_decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl Default for AdamWOptions {
    fn default() -> Self {
        AdamWOptions { lr: 1e-3, weight_decay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8 }
    }
}

/// The optimiser's settings for one step of the encoder's fine-tuner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOptions {
    pub learning_rate: f32,
    pub weight_decay: f32,
    /// Clip the gradients' global L2 norm to this (`torch.nn.utils.clip_grad_norm_`); `None`: no clipping.
    pub max_grad_norm: Option<f32>,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl Default for StepOptions {
    /// transformers' `TrainingArguments` defaults (learning rate 5e-5, no weight decay, clipping at 1.0, AdamW
    /// betas (0.9, 0.999), eps 1e-8).
    fn default() -> Self {
        StepOptions { learning_rate: 5e-5, weight_decay: 0.0, max_grad_norm: Some(1.0), beta1: 0.9, beta2: 0.999, eps: 1e-8 }
    }
}

/// AdamW's state over a list of parameters (tensors `T` of a backend), indexed as the owner lists its parameters.
pub struct AdamW<T> {
    /// `(m, v)` per parameter; `None` before its first update.
    moments: Vec<Option<(T, T)>>,
    /// Steps taken so far (AdamW's t is this + 1 on the next step).
    steps: u32,
}

impl<T> Default for AdamW<T> {
    fn default() -> Self {
        AdamW { moments: Vec::new(), steps: 0 }
    }
}

impl<T> AdamW<T> {
    /// No steps taken, no moments: each parameter gets zero moments at its first update.
    pub fn new() -> Self {
        Self::default()
    }

    /// State restored from a checkpoint: the moments per parameter and the steps taken.
    pub fn from_state(moments: Vec<Option<(T, T)>>, steps: u32) -> Self {
        AdamW { moments, steps }
    }

    /// Zero moments for every parameter of these `(rows, cols)` shapes at once (trainHead, whose parameters are all
    /// trained from the first step).
    pub fn zeroed<B: Backend<Tensor = T>>(be: &B, shapes: &[(usize, usize)]) -> Result<Self> {
        let mut moments = Vec::with_capacity(shapes.len());
        for &(r, c) in shapes {
            moments.push(Some((be.input(&vec![0.0; r * c], r, c)?, be.input(&vec![0.0; r * c], r, c)?)));
        }
        Ok(AdamW { moments, steps: 0 })
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// Parameter `i`'s moments `(m, v)`, once it has been updated.
    pub fn moments(&self, i: usize) -> Option<&(T, T)> {
        self.moments.get(i).and_then(Option::as_ref)
    }

    /// Starts a step: the count goes up, and the updates that follow are this step's. Returns AdamW's `t`.
    pub fn begin_step(&mut self) -> u32 {
        self.steps += 1;
        self.steps
    }

    /// Takes back the step begun last, which updated nothing (the backend's kernel leaves every parameter and moment
    /// as it was where the gradients are not finite).
    pub fn undo_step(&mut self) {
        self.steps -= 1;
    }

    /// Updates parameter `i` of shape `(rows, cols)` (out of `count`) by its gradient with the step's settings `s`
    /// (made with [`Self::begin_step`]'s t), and returns the new parameter. `norm_sq`: the squared global norm of all
    /// gradients, for clipping and the finiteness check, where the step has one.
    #[allow(clippy::too_many_arguments)]
    pub fn update<B: Backend<Tensor = T>>(&mut self, be: &B, i: usize, count: usize, param: &T, shape: (usize, usize),
        grad: &T, s: &AdamWStep, norm_sq: Option<&T>) -> Result<T> {
        self.moments.resize_with(count.max(self.moments.len()), || None);
        let (m, v) = match self.moments[i].take() {
            Some(mv) => mv,
            None => {
                let (r, c) = shape;
                (be.input(&vec![0.0; r * c], r, c)?, be.input(&vec![0.0; r * c], r, c)?)
            }
        };
        let (p, m, v) = be.adamw(param, grad, &m, &v, s, norm_sq)?;
        self.moments[i] = Some((m, v));
        Ok(p)
    }
}
