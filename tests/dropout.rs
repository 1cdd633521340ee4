//! Dropout in fine-tuning (`Backend::dropout`, `Backend::attention_dropout`, `attention_backward`'s mask, the
//! encoder's and the heads' sites): the GPU kernels against their CPU twins with the *same* masks, the kept fraction
//! against 1 − p, p = 0 against no dropout bit for bit (and no extra pipeline), a finite-difference check of the
//! whole model's gradient with a fixed dropout seed, and the fine-tuner's seeding (a new mask per micro-batch, the
//! same for a seed, none in evaluation). GPU tests skip (with a message) where no adapter exists.

use std::path::Path;

use bertgpu::activation::Activation;
use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{AttentionKernel, GpuBackend, Tuning};
use bertgpu::backend::{AttentionShape, Backend, Dropout};
use bertgpu::config::BertConfig;
use bertgpu::tokenizer::Batch;
use bertgpu::training::encoder::{DropoutOptions, DropoutPlan, HEAD_STREAM};
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::weights::Weights;

mod common;
use common::attention::padded_mask;
use common::{assert_close, gpu, rand_vec};

/// dropout: the same mask (integer hash) and one f32 product `x · scale` per kept element on both sides:
/// bit-identical.
const DROPOUT_TOL: f32 = 0.0;
/// attention_dropout: the GPU's online softmax (running max, rescaled sums, one division at the end) vs the CPU's
/// normalised probabilities and GEMM, f32 exp on both; outputs are O(1) (|v| < 2, scaled by ≤ 1/(1 − 0.5)): a few
/// ulps, as tests/gpu_kernels.rs's attention bound.
const ATT_FWD_ATOL: f32 = 2e-5;
const ATT_FWD_RTOL: f32 = 1e-5;
/// attention_backward with dropout: as tests/backward_gpu.rs's bound (f32 exp, Σ P⊙dP in f32 vs f64), the mask
/// factors ≤ 2 scale the O(1) gradients by at most that.
const ATT_BWD_ATOL: f32 = 2e-5;
const ATT_BWD_RTOL: f32 = 2e-4;
/// Statistical bound on counts of kept elements: |count − n·q| ≤ 5σ, σ = √(n·q·(1 − q)) (binomial): a sound hash
/// fails it with probability ≈ 6e-7 per check.
const SIGMAS: f64 = 5.0;
/// The whole model's gradients, GPU against CPU with the same masks (`‖gpu − cpu‖ / ‖cpu‖` per tensor). Measured
/// worst on lavapipe: 4.7e-6 (tiny-classifier); 3e-5 is 6.4× that. A mask that differed anywhere would give errors
/// of order 1.
const GPU_GRAD_RTOL: f64 = 3e-5;
/// Finite differences: the central difference of the f64 loss of f32 logits along a random unit direction, step
/// `FD_STEP`, against the analytic directional derivative. Truncation O(h²·L''') and f32 rounding of the logits
/// (≈ 1e-7 relative, over 2h) bound the relative error near 1e-3 on these tensors; a gradient taken with the wrong
/// masks (or none) is off by 10–100% (checked below).
const FD_STEP: f32 = 1e-2;
const FD_RTOL: f64 = 1e-2;

type CpuT = <CpuBackend as Backend>::Tensor;

fn read<B: Backend>(be: &B, t: &B::Tensor) -> Vec<f32> {
    pollster::block_on(be.read(t)).unwrap()
}

/// |count − n·q| in units of the binomial σ.
fn sigmas(count: usize, n: usize, q: f64) -> f64 {
    (count as f64 - n as f64 * q).abs() / (n as f64 * q * (1.0 - q)).sqrt()
}

#[test]
fn dropout_masks_match_cpu_bit_for_bit() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    for &(r, c) in &[(1usize, 1usize), (7, 33), (33, 384), (257, 65)] {
        let x = rand_vec(r * c, (r * c) as u64);
        for &(p, seed, stream) in &[(0.1f32, 0u32, 0u32), (0.5, 7, 3), (0.9, 0xFFFF_FFFF, u32::MAX)] {
            let d = Dropout { p, seed, stream };
            let want = cpu.dropout(&cpu.input(&x, r, c).unwrap(), d).unwrap();
            let got = g.dropout(&g.input(&x, r, c).unwrap(), d).unwrap();
            assert_eq!(g.dims(&got), (r, c));
            let (got, want) = (read(&g, &got), want.to_vec());
            let err = assert_close(&format!("dropout {r}x{c} p {p}"), &got, &want, DROPOUT_TOL, DROPOUT_TOL);
            eprintln!("max |err| {err:e}  dropout {r}x{c} p {p}");
            // Kept values are x · scale exactly, dropped ones 0 (x is never 0 here).
            for (i, (&y, &xv)) in got.iter().zip(&x).enumerate() {
                let keep = Dropout::keeps(d.key(), d.threshold(), i as u32);
                assert_eq!(y, if keep { xv * d.scale() } else { 0.0 }, "element {i}");
            }
        }
    }
}

#[test]
fn kept_fraction_is_one_minus_p() {
    let cpu = CpuBackend::new();
    let n = 1usize << 22;
    let ones = cpu.input(&vec![1.0f32; n], 1024, n / 1024).unwrap();
    let kept = |d: Dropout| -> Vec<bool> { cpu.dropout(&ones, d).unwrap().to_vec().iter().map(|&v| v != 0.0).collect() };
    for &p in &[0.1f32, 0.5, 0.9] {
        let a = kept(Dropout { p, seed: 42, stream: 0 });
        let q = 1.0 - p as f64;
        let count = a.iter().filter(|&&k| k).count();
        let z = sigmas(count, n, q);
        eprintln!("p {p}: kept {count} of {n} = {:.6} (1 − p = {q}), {z:.2}σ", count as f64 / n as f64);
        assert!(z < SIGMAS, "p {p}: kept {count} of {n}, {z:.2}σ from n(1 − p)");
        // Another stream and another seed: independent masks, so both keep an element with probability (1 − p)².
        for (what, d) in [("stream", Dropout { p, seed: 42, stream: 1 }), ("seed", Dropout { p, seed: 43, stream: 0 })] {
            let b = kept(d);
            let both = a.iter().zip(&b).filter(|(x, y)| **x && **y).count();
            let z = sigmas(both, n, q * q);
            eprintln!("p {p}: kept by both masks (other {what}) {both}, {z:.2}σ from n(1 − p)²");
            assert!(z < SIGMAS, "p {p}, another {what}: {both} kept by both, {z:.2}σ from independence");
        }
    }
    // The GPU's kernel on the same large tensor: the same count (its mask is the CPU's).
    let Some(g) = gpu() else { return };
    let d = Dropout { p: 0.1, seed: 42, stream: 0 };
    let got = read(&g, &g.dropout(&g.input(&vec![1.0f32; n], 1024, n / 1024).unwrap(), d).unwrap());
    let want = cpu.dropout(&ones, d).unwrap().to_vec();
    assert!(got == want, "GPU and CPU masks differ on {n} elements");
}

/// With q = k = 0 every real key has probability 1/K, and with v_j the unit vector e_j (head_dim ≥ T), context
/// column j of query i is F_ij/K: the attention mask itself, read back. Both sides must drop the same probabilities,
/// with the default kernel and with the split one (each query over head_dim/4 invocations).
#[test]
fn attention_dropout_masks_are_the_cpus() {
    let Some(g) = gpu() else { return };
    for kernel in [AttentionKernel::Vec4, AttentionKernel::Split, AttentionKernel::SplitSubgroup] {
        g.set_tuning(Tuning { attention: kernel, ..Tuning::default() });
        eprintln!("{kernel:?}");
        attention_dropout_masks(&g);
    }
}

fn attention_dropout_masks(g: &GpuBackend) {
    let cpu = CpuBackend::new();
    let (b, t, heads, d, lens) = (2usize, 7usize, 2usize, 8usize, [7usize, 5]);
    let h = heads * d;
    let mut qkv = vec![0f32; b * t * 3 * h];
    for row in 0..b * t {
        for hd in 0..heads {
            qkv[row * 3 * h + 2 * h + hd * d + row % t] = 1.0;
        }
    }
    let mask = padded_mask(b, t, &lens);
    let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
    let drop = Dropout { p: 0.5, seed: 9, stream: 4 };
    let want = cpu.attention_dropout(&cpu.input(&qkv, b * t, 3 * h).unwrap(), &cpu.input(&mask, b, t).unwrap(), s, drop).unwrap();
    let got = g.attention_dropout(&g.input(&qkv, b * t, 3 * h).unwrap(), &g.input(&mask, b, t).unwrap(), s, drop).unwrap();
    let (got, want) = (read(g, &got), want.to_vec());
    assert_close("attention_dropout one-hot v", &got, &want, ATT_FWD_ATOL, ATT_FWD_RTOL);
    let (key, threshold) = (drop.key(), drop.threshold());
    let mut dropped = 0;
    for bi in 0..b {
        for hd in 0..heads {
            for i in 0..t {
                for j in 0..t {
                    let v = got[(bi * t + i) * h + hd * d + j];
                    let idx = (((bi * heads + hd) * t + i) * t + j) as u32;
                    let want = if j < lens[bi] && Dropout::keeps(key, threshold, idx) { drop.scale() / lens[bi] as f32 } else { 0.0 };
                    assert!((v - want).abs() <= 1e-6, "b{bi} h{hd} query {i} key {j}: {v}, the mask says {want}");
                    dropped += (j < lens[bi] && v == 0.0) as usize;
                }
            }
        }
    }
    let real = heads * t * lens.iter().sum::<usize>();
    eprintln!("attention probabilities dropped: {dropped} of {real} at p 0.5");
    assert!(dropped > 0 && dropped < real, "some, not all, probabilities dropped");
}

#[test]
fn attention_dropout_and_backward_match_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let cases: &[(usize, usize, usize, usize, &[usize])] =
        &[(2, 7, 4, 8, &[7, 4]), (2, 5, 2, 4, &[0, 3]), (1, 1, 1, 1, &[1]), (2, 33, 2, 64, &[33, 20]), (1, 9, 3, 5, &[9])];
    for &(b, t, heads, d, lens) in cases {
        let h = heads * d;
        let qkv: Vec<f32> = rand_vec(b * t * 3 * h, (b * t * h) as u64).iter().map(|v| v * 2.0).collect();
        let dctx = rand_vec(b * t * h, 31);
        let mask = padded_mask(b, t, lens);
        let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
        let ci = |v: &[f32], r, c| cpu.input(v, r, c).unwrap();
        let gi = |v: &[f32], r, c| g.input(v, r, c).unwrap();
        let what = format!("b{b} t{t} heads{heads} d{d} lens {lens:?}");
        for p in [0.1f32, 0.5] {
            let drop = Dropout { p, seed: 5, stream: 2 };
            let want = cpu.attention_dropout(&ci(&qkv, b * t, 3 * h), &ci(&mask, b, t), s, drop).unwrap();
            let got = g.attention_dropout(&gi(&qkv, b * t, 3 * h), &gi(&mask, b, t), s, drop).unwrap();
            let err = assert_close(&format!("attention_dropout p {p} {what}"), &read(&g, &got), &want.to_vec(), ATT_FWD_ATOL, ATT_FWD_RTOL);
            eprintln!("max |err| {err:e}  attention_dropout p {p} {what}");
            let want = cpu.attention_backward(&ci(&dctx, b * t, h), &ci(&qkv, b * t, 3 * h), &ci(&mask, b, t), s, Some(drop)).unwrap();
            let got = g.attention_backward(&gi(&dctx, b * t, h), &gi(&qkv, b * t, 3 * h), &gi(&mask, b, t), s, Some(drop)).unwrap();
            let got = read(&g, &got);
            let err = assert_close(&format!("attention_backward dropout p {p} {what}"), &got, &want.to_vec(), ATT_BWD_ATOL, ATT_BWD_RTOL);
            eprintln!("max |err| {err:e}  attention_backward dropout p {p} {what}");
            // The mask changed the gradient (where there is something to drop).
            let plain = cpu.attention_backward(&ci(&dctx, b * t, h), &ci(&qkv, b * t, 3 * h), &ci(&mask, b, t), s, None).unwrap();
            if lens.iter().any(|&l| l > 1) {
                assert_ne!(plain.to_vec(), want.to_vec(), "{what}: dropout p {p} changed nothing");
            }
        }
    }
}

/// The numerical gradient of `x ↦ Σ w ⊙ attention_dropout(x)` for the attention op alone, on the CPU twin: with a
/// fixed mask the op is smooth, so attention_backward (with the same mask) must match central differences.
#[test]
fn attention_backward_with_dropout_matches_finite_differences() {
    let cpu = CpuBackend::new();
    let (b, t, heads, d) = (2usize, 5usize, 2usize, 3usize);
    let h = heads * d;
    let qkv: Vec<f64> = rand_vec(b * t * 3 * h, 3).iter().map(|&v| v as f64).collect();
    let w = rand_vec(b * t * h, 4);
    let mask = padded_mask(b, t, &[5, 3]);
    let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
    let drop = Dropout { p: 0.3, seed: 11, stream: 1 };
    let m = cpu.input(&mask, b, t).unwrap();
    let loss = |x: &[f64]| -> f64 {
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let y = cpu.attention_dropout(&cpu.input(&x32, b * t, 3 * h).unwrap(), &m, s, drop).unwrap().to_vec();
        y.iter().zip(&w).map(|(&a, &c)| a as f64 * c as f64).sum()
    };
    let q32: Vec<f32> = qkv.iter().map(|&v| v as f32).collect();
    let grad = cpu.attention_backward(&cpu.input(&w, b * t, h).unwrap(), &cpu.input(&q32, b * t, 3 * h).unwrap(), &m, s, Some(drop))
        .unwrap()
        .to_vec();
    let plain = cpu.attention_backward(&cpu.input(&w, b * t, h).unwrap(), &cpu.input(&q32, b * t, 3 * h).unwrap(), &m, s, None)
        .unwrap()
        .to_vec();
    let step = 1e-2;
    let (mut worst, mut plain_worst) = (0f64, 0f64);
    for i in 0..qkv.len() {
        let (mut up, mut down) = (qkv.clone(), qkv.clone());
        up[i] += step;
        down[i] -= step;
        let fd = (loss(&up) - loss(&down)) / (2.0 * step);
        worst = worst.max((fd - grad[i] as f64).abs());
        plain_worst = plain_worst.max((fd - plain[i] as f64).abs());
    }
    eprintln!("attention op: max |fd − grad| {worst:e} with the mask, {plain_worst:e} without it");
    // f32 forward (≈ 1e-7 per output, over 2·step) and O(step²) truncation: 1e-4 absolute on O(1) gradients.
    assert!(worst < 1e-4, "attention_backward with dropout: max |fd − grad| {worst:e}");
    assert!(plain_worst > 100.0 * worst, "the check tells the mask from none ({plain_worst:e})");
}

// ---- The whole model ----

fn tiny(name: &str) -> (BertConfig, Weights) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(name);
    (BertConfig::from_file(dir.join("config.json")).unwrap(), Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap())
}

/// Two sequences of 9 tokens, the second padded after 6; ids inside the tiny models' vocabulary of 480.
fn batch() -> Batch {
    Batch {
        input_ids: vec![2, 45, 301, 17, 88, 120, 7, 400, 3, 2, 66, 5, 210, 9, 3, 0, 0, 0],
        token_type_ids: vec![0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        attention_mask: vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
        b: 2,
        t: 9,
    }
}

const PLAN: DropoutPlan = DropoutPlan { hidden: 0.2, attention: 0.2, classifier: 0.2, pooler: 0.2, embedding: 0.2, seed: 1234 };

fn tuner<B: Backend>(be: &B, name: &str, task: FineTuneTask) -> FineTuner<B> {
    let (cfg, w) = tiny(name);
    FineTuner::new(be, &cfg, &w, task, None, 0).unwrap()
}

#[test]
fn p_zero_is_no_dropout_exactly() {
    let cpu = CpuBackend::new();
    let zero = DropoutPlan { hidden: 0.0, attention: 0.0, classifier: 0.0, pooler: 0.0, embedding: 0.0, seed: 99 };
    let bt = batch();
    let labels = [1u32, 2];
    let run = |be: &mut dyn FnMut(Option<DropoutPlan>) -> (Vec<Vec<f32>>, Vec<f32>)| {
        let (g0, l0) = be(None);
        let (g1, l1) = be(Some(zero));
        assert!(l0 == l1 && g0 == g1, "p = 0 must give exactly the gradients and logits of no dropout");
    };
    let tc = tuner(&cpu, "tiny-classifier", FineTuneTask::Sequence);
    run(&mut |plan| {
        let (g, l) = tc.gradients_with(&cpu, &bt, &Targets::Sequence(&labels), plan).unwrap();
        (g.iter().map(|t| read(&cpu, t.as_ref().unwrap())).collect(), read(&cpu, &l))
    });
    // The attention op alone: Some(p = 0) is None.
    let (b, t, heads, d) = (2, 7, 4, 8);
    let h = heads * d;
    let qkv = rand_vec(b * t * 3 * h, 1);
    let dctx = rand_vec(b * t * h, 2);
    let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
    let mask = padded_mask(b, t, &[7, 4]);
    let op = |be: &dyn Fn(Option<Dropout>) -> Vec<f32>| {
        assert_eq!(be(None), be(Some(Dropout { p: 0.0, seed: 3, stream: 3 })), "attention_backward with p = 0");
    };
    let ci = |v: &[f32], r, c| -> CpuT { cpu.input(v, r, c).unwrap() };
    op(&|d| cpu.attention_backward(&ci(&dctx, b * t, h), &ci(&qkv, b * t, 3 * h), &ci(&mask, b, t), s, d).unwrap().to_vec());
    let Some(g) = gpu() else { return };
    let gi = |v: &[f32], r, c| g.input(v, r, c).unwrap();
    op(&|d| read(&g, &g.attention_backward(&gi(&dctx, b * t, h), &gi(&qkv, b * t, 3 * h), &gi(&mask, b, t), s, d).unwrap()));
    let tg = tuner(&g, "tiny-classifier", FineTuneTask::Sequence);
    let mut pipelines = None;
    run(&mut |plan| {
        let (gr, l) = tg.gradients_with(&g, &bt, &Targets::Sequence(&labels), plan).unwrap();
        let out = (gr.iter().map(|t| read(&g, t.as_ref().unwrap())).collect(), read(&g, &l));
        // The p = 0 run (second) compiles no pipeline the run without dropout did not: no dropout kernel runs.
        let n = g.pipeline_count();
        assert!(pipelines.replace(n).is_none_or(|before| before == n), "p = 0 made new pipelines");
        out
    });
}

/// transformers' `TransformerBlock` (DistilBERT) in the CPU backend's ops, from the checkpoint's own tensors, with
/// the dropout sites the encoder numbers (0 after the embeddings; for layer l, 3l + 1 the attention's probabilities,
/// 3l + 2 after the attention's output projection, 3l + 3 after the feed-forward): `attn_out` says whether the
/// 3l + 2 site is drawn (BERT's `BertSelfOutput` has it; DistilBERT's `MultiHeadSelfAttention` applies its dropout to
/// the attention weights only and `out_lin`'s output goes straight into `sa_layer_norm`).
fn distilbert_reference(cpu: &CpuBackend, cfg: &BertConfig, w: &Weights, bt: &Batch, plan: DropoutPlan, attn_out: bool)
    -> Vec<f32> {
    let t = |n: &str| -> CpuT {
        let h = w.stored(&format!("distilbert.{n}")).unwrap_or_else(|| panic!("no tensor distilbert.{n}"));
        let v = h.to_f32().unwrap();
        let (r, c) = if h.shape.len() == 2 { (h.shape[0], h.shape[1]) } else { (1, h.shape[0]) };
        cpu.input(&v, r, c).unwrap()
    };
    let eps = cfg.layer_norm_eps;
    let drop = |x: CpuT, stream: u32| cpu.dropout(&x, Dropout { p: plan.hidden, seed: plan.seed, stream }).unwrap();
    let word = cpu.gather_rows(&t("embeddings.word_embeddings.weight"), &bt.input_ids.iter().map(|&i| i as u32).collect::<Vec<_>>()).unwrap();
    let pos_ids: Vec<u32> = (0..bt.b).flat_map(|_| 0..bt.t as u32).collect();
    let pos = cpu.gather_rows(&t("embeddings.position_embeddings.weight"), &pos_ids).unwrap();
    let e = cpu.layernorm(&cpu.add(&word, &pos).unwrap(), None, &t("embeddings.LayerNorm.weight"), &t("embeddings.LayerNorm.bias"), eps).unwrap();
    let mut x = drop(e, 0);
    let mask = cpu.mask(bt).unwrap();
    let heads = cfg.num_attention_heads;
    let shape = AttentionShape { batch: bt.b, seq: bt.t, heads, head_dim: cfg.hidden_size / heads };
    for l in 0..cfg.num_hidden_layers {
        let s = 3 * l as u32;
        let n = |k: &str| format!("transformer.layer.{l}.{k}");
        let lin = |x: &CpuT, k: &str| cpu.linear(x, &t(&n(&format!("{k}.weight"))), Some(&t(&n(&format!("{k}.bias")))), Activation::None).unwrap();
        let (q, k, v) = (lin(&x, "attention.q_lin"), lin(&x, "attention.k_lin"), lin(&x, "attention.v_lin"));
        let qkv = cpu.input(&(0..bt.b * bt.t).flat_map(|r| [&q, &k, &v].map(|m| m.to_vec()[r * cfg.hidden_size..(r + 1) * cfg.hidden_size].to_vec()).concat()).collect::<Vec<_>>(), bt.b * bt.t, 3 * cfg.hidden_size).unwrap();
        let ctx = cpu.attention_dropout(&qkv, &mask, shape, Dropout { p: plan.attention, seed: plan.seed, stream: s + 1 }).unwrap();
        let mut sa = lin(&ctx, "attention.out_lin");
        if attn_out {
            sa = drop(sa, s + 2);
        }
        let sa = cpu.layernorm(&cpu.add(&sa, &x).unwrap(), None, &t(&n("sa_layer_norm.weight")), &t(&n("sa_layer_norm.bias")), eps).unwrap();
        let u = cpu.activation(&lin(&sa, "ffn.lin1"), cfg.hidden_act).unwrap();
        let f = drop(lin(&u, "ffn.lin2"), s + 3);
        x = cpu.layernorm(&cpu.add(&f, &sa).unwrap(), None, &t(&n("output_layer_norm.weight")), &t(&n("output_layer_norm.bias")), eps).unwrap();
    }
    x.to_vec()
}

#[test]
fn distilbert_drops_where_transformers_does() {
    let cpu = CpuBackend::new();
    let (cfg, w) = tiny("tiny-distilbert-classifier");
    let bt = batch();
    let bt = Batch { token_type_ids: vec![0; bt.token_type_ids.len()], ..bt };
    let enc = bertgpu::training::encoder::Encoder::load(&cpu, &cfg, &w).unwrap();
    let (ours, _) = enc.forward(&cpu, &bt, Some(PLAN)).unwrap();
    let ours = ours.to_vec();
    let want = distilbert_reference(&cpu, &cfg, &w, &bt, PLAN, false);
    let err = assert_close("DistilBERT's training forward against TransformerBlock's dropout sites", &ours, &want, 1e-5, 1e-5);
    eprintln!("DistilBERT with dropout: max |err| {err:e} against transformers' layout");
    // The reference tells the sites apart: BERT's extra dropout after the output projection moves the outputs by O(1).
    let bert_layout = distilbert_reference(&cpu, &cfg, &w, &bt, PLAN, true);
    let apart = ours.iter().zip(&bert_layout).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(apart > 0.1, "the reference cannot tell BERT's dropout layout from DistilBERT's ({apart:e})");
}

/// Every parameter's gradient, `‖a − b‖ / ‖b‖` per tensor; the largest.
fn worst_relative(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let diff: f64 = x.iter().zip(y).map(|(&p, &q)| (p as f64 - q as f64).powi(2)).sum::<f64>().sqrt();
            let norm: f64 = y.iter().map(|&q| (q as f64).powi(2)).sum::<f64>().sqrt();
            if norm == 0.0 { diff } else { diff / norm }
        })
        .fold(0.0, f64::max)
}

#[test]
fn dropout_gradients_match_on_gpu_and_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let bt = batch();
    let labels = [1u32, 2];
    let tags: Vec<i64> = vec![-100, 1, 2, 0, 3, 4, 0, 5, -100, -100, 6, 0, 1, 2, -100, -100, -100, -100];
    for (model, task) in [("tiny-classifier", FineTuneTask::Sequence), ("tiny-ner", FineTuneTask::Token),
        ("tiny-gte-classifier", FineTuneTask::Sequence), ("tiny-nomic-ner", FineTuneTask::Token),
        ("tiny-modernbert-classifier", FineTuneTask::Sequence), ("tiny-modernbert-ner", FineTuneTask::Token),
        ("tiny-deberta-classifier", FineTuneTask::Sequence), ("tiny-distilbert-qa", FineTuneTask::Qa)] {
        let targets = match task {
            FineTuneTask::Sequence => Targets::Sequence(&labels),
            FineTuneTask::Qa => Targets::Qa { start: &QA_START, end: &QA_END },
            _ => Targets::Token(&tags),
        };
        let tc = tuner(&cpu, model, task);
        let tg = tuner(&g, model, task);
        let (gc, lc) = tc.gradients_with(&cpu, &bt, &targets, Some(PLAN)).unwrap();
        let (gg, lg) = tg.gradients_with(&g, &bt, &targets, Some(PLAN)).unwrap();
        // `qa_outputs.bias`'s gradient is zero but for rounding (each column's softmax gradient sums to 0 over the
        // positions, and the bias shifts every position alike): no relative error to measure.
        let zero = |i: usize| tc.encoder.params[i].names[0] == "qa_outputs.bias";
        let gc: Vec<Vec<f32>> = gc.iter().enumerate().filter(|&(i, _)| !zero(i)).map(|(_, t)| read(&cpu, t.as_ref().unwrap())).collect();
        let gg: Vec<Vec<f32>> = gg.iter().enumerate().filter(|&(i, _)| !zero(i)).map(|(_, t)| read(&g, t.as_ref().unwrap())).collect();
        let err = worst_relative(&gg, &gc);
        let (lc, lg) = (read(&cpu, &lc), read(&g, &lg));
        let lerr = worst_relative(&[lg], std::slice::from_ref(&lc));
        eprintln!("{model}: GPU vs CPU with dropout: worst gradient ‖Δ‖/‖g‖ {err:e}, logits {lerr:e}");
        assert!(err < GPU_GRAD_RTOL && lerr < GPU_GRAD_RTOL, "{model}: gradients {err:e}, logits {lerr:e}");
        // The plan dropped something: the logits are not those without dropout.
        let (_, plain) = tc.gradients_with(&cpu, &bt, &targets, None).unwrap();
        assert_ne!(read(&cpu, &plain), lc, "{model}: dropout changed nothing");
    }
}

/// The loss of `tuner`'s forward with `plan`, in f64 from the logits.
fn loss(tuner: &FineTuner<CpuBackend>, cpu: &CpuBackend, bt: &Batch, targets: &Targets<'_>, plan: Option<DropoutPlan>) -> f64 {
    let (_, logits) = tuner.gradients_with(cpu, bt, targets, plan).unwrap();
    tuner.loss(&read(cpu, &logits), bt.t, targets) as f64
}

#[test]
fn dropout_gradients_match_finite_differences() {
    finite_differences("tiny-classifier", &[
        "bert.embeddings.word_embeddings.weight",
        "bert.embeddings.LayerNorm.weight",
        "bert.encoder.layer.0.attention.self.query.weight",
        "bert.encoder.layer.0.attention.output.dense.weight",
        "bert.encoder.layer.1.intermediate.dense.bias",
        "bert.encoder.layer.1.output.dense.weight",
        "bert.pooler.dense.weight",
        "classifier.weight",
    ]);
}

/// DistilBERT's backward leaves out the dropout its forward has not after `out_lin` (the gradient through that
/// site, masked, would be off by the mask's factors).
#[test]
fn distilbert_dropout_gradients_match_finite_differences() {
    finite_differences("tiny-distilbert-classifier", &[
        "distilbert.embeddings.word_embeddings.weight",
        "distilbert.transformer.layer.0.attention.q_lin.weight",
        "distilbert.transformer.layer.0.attention.out_lin.weight",
        "distilbert.transformer.layer.0.sa_layer_norm.weight",
        "distilbert.transformer.layer.1.attention.out_lin.bias",
        "distilbert.transformer.layer.1.ffn.lin2.weight",
        "pre_classifier.weight",
    ]);
}

/// The rotary families: GTE's backward through its dropout on the gated product (`GteMLP.dropout`, before
/// `down_proj`) and both through the rotation's transpose and the gated feed-forward's backward.
#[test]
fn rotary_dropout_gradients_match_finite_differences() {
    finite_differences("tiny-gte-classifier", &[
        "gte.embeddings.word_embeddings.weight",
        "gte.encoder.layer.0.attention.qkv_proj.weight",
        "gte.encoder.layer.0.mlp.up_gate_proj.weight",
        "gte.encoder.layer.1.mlp.down_proj.weight",
        "gte.encoder.layer.1.attn_ln.weight",
    ]);
    finite_differences("tiny-nomic-classifier", &[
        "nomic_bert.encoder.layers.0.attn.Wqkv.weight",
        "nomic_bert.encoder.layers.0.mlp.fc11.weight",
        "nomic_bert.encoder.layers.1.mlp.fc2.weight",
    ]);
}

/// ModernBERT drops where `ModernBertModel` does: the embeddings' norm, the attention probabilities (a local
/// layer's with its window), `out_drop` after `Wo`, the gated product before `mlp.Wo`, and `head`'s output before the
/// classifier; by the first token and by the mean (tiny-modernbert-mean: every bias, `Wi`'s swapped through its
/// permutation). The word table is left out: the batch's id 3 is ModernBERT's padding token, whose row gets no
/// gradient (`padding_idx`, as transformers) though a difference of the loss sees it.
#[test]
fn modernbert_dropout_gradients_match_finite_differences() {
    finite_differences("tiny-modernbert-classifier", &[
        "model.embeddings.norm.weight",
        "model.layers.0.attn.Wqkv.weight",
        "model.layers.1.attn.Wqkv.weight",
        "model.layers.1.attn.Wo.weight",
        "model.layers.2.mlp.Wi.weight",
        "model.layers.2.mlp_norm.weight",
        "model.layers.3.mlp.Wo.weight",
        "head.dense.weight",
    ]);
    finite_differences("tiny-modernbert-mean", &[
        "model.layers.1.attn.Wqkv.bias",
        "model.layers.2.mlp.Wi.bias",
        "model.layers.3.attn_norm.bias",
        "head.norm.weight",
    ]);
    // `embedding_dropout` apart from `mlp_dropout`: the embeddings' norm below every layer sees both masks, and the
    // backward must apply each site's own.
    finite_differences_with("tiny-modernbert-classifier", FineTuneTask::Sequence, MODERN_APART, &[
        "model.embeddings.norm.weight",
        "model.layers.0.attn.Wqkv.weight",
        "model.layers.2.mlp.Wi.weight",
    ]);
}

/// ModernBERT's `embedding_dropout` and `mlp_dropout` at different probabilities.
const MODERN_APART: DropoutPlan = DropoutPlan { embedding: 0.5, hidden: 0.1, ..PLAN };

/// ModernBERT's two sites read their own probabilities: the embeddings' (stream 0) the plan's `embedding`, the gated
/// product's (`ModernBertMLP.drop`) `hidden`. A forward with them apart is neither the forward with both at the
/// one nor at the other (each site is seen), and the checkpoint's keys give the two probabilities
/// (`ModernBertModel`'s `embeddings.drop` at `embedding_dropout`, `mlp.drop` at `mlp_dropout`).
/// On the GPU the same masks give the CPU's gradients.
#[test]
fn modernbert_embedding_and_mlp_dropouts_are_apart() {
    let cpu = CpuBackend::new();
    let (cfg, w) = tiny("tiny-modernbert-classifier");
    let bt = batch();
    let enc = bertgpu::training::encoder::Encoder::load(&cpu, &cfg, &w).unwrap();
    let out = |plan: DropoutPlan| enc.forward(&cpu, &bt, Some(plan)).unwrap().0.to_vec();
    let apart = out(MODERN_APART);
    let p = MODERN_APART;
    for (what, other) in [("both at the embeddings'", DropoutPlan { hidden: p.embedding, ..p }),
        ("both at the MLP's", DropoutPlan { embedding: p.hidden, ..p })] {
        let d = apart.iter().zip(out(other)).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(d > 1e-2, "{what}: the forward did not change ({d:e})");
    }
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/tiny-modernbert-classifier/config.json")).unwrap()).unwrap();
    v["embedding_dropout"] = serde_json::json!(0.05);
    v["mlp_dropout"] = serde_json::json!(0.3);
    let o = DropoutOptions::of_config(&BertConfig::from_json_str(&v.to_string()).unwrap(), 0);
    assert_eq!((o.embedding, o.hidden), (0.05, 0.3), "embedding_dropout, mlp_dropout");
    let (bert, _) = tiny("tiny-classifier");
    let o = DropoutOptions::of_config(&bert, 0);
    assert_eq!(o.embedding, o.hidden, "BERT's embeddings drop at hidden_dropout_prob");
    // The GPU with the two apart: the same masks, so the CPU's gradients.
    let Some(g) = gpu() else { return };
    let labels = [1u32, 2];
    let targets = Targets::Sequence(&labels);
    let grads = |gr: Vec<Option<Vec<f32>>>| gr.into_iter().map(Option::unwrap).collect::<Vec<_>>();
    let (gc, _) = tuner(&cpu, "tiny-modernbert-classifier", FineTuneTask::Sequence)
        .gradients_with(&cpu, &bt, &targets, Some(MODERN_APART)).unwrap();
    let (gg, _) = tuner(&g, "tiny-modernbert-classifier", FineTuneTask::Sequence)
        .gradients_with(&g, &bt, &targets, Some(MODERN_APART)).unwrap();
    let gc = grads(gc.iter().map(|t| t.as_ref().map(|t| read(&cpu, t))).collect());
    let gg = grads(gg.iter().map(|t| t.as_ref().map(|t| read(&g, t))).collect());
    let err = worst_relative(&gg, &gc);
    eprintln!("tiny-modernbert-classifier, embedding_dropout apart: GPU vs CPU worst gradient ‖Δ‖/‖g‖ {err:e}");
    assert!(err < GPU_GRAD_RTOL, "GPU gradients with the two dropouts apart: {err:e}");
}

/// MPNet drops where `MPNetModel` does (BERT's four sites: the embeddings, the attention probabilities with the
/// relative bias added before the softmax, `MPNetAttention`'s dropout of `attn.o`'s output, `MPNetOutput`'s), and
/// the relative bias table's gradient goes through the masked probabilities.
#[test]
fn mpnet_dropout_gradients_match_finite_differences() {
    finite_differences("tiny-mpnet-classifier", &[
        "mpnet.embeddings.word_embeddings.weight",
        "mpnet.encoder.relative_attention_bias.weight",
        "mpnet.encoder.layer.0.attention.attn.q.weight",
        "mpnet.encoder.layer.0.attention.attn.o.weight",
        "mpnet.encoder.layer.1.attention.LayerNorm.weight",
        "mpnet.encoder.layer.1.output.dense.weight",
        "classifier.dense.weight",
    ]);
}

/// DeBERTa drops where `DebertaV2Model` does (transformers 5's plain `nn.Dropout`: the embeddings, the attention
/// probabilities with the disentangled terms added before the softmax, each layer's `pos_dropout` on the relative
/// table it projects, the attention's and the feed-forward's outputs), and the relative table's and its LayerNorm's
/// gradients go through every layer's masks.
#[test]
fn deberta_dropout_gradients_match_finite_differences() {
    finite_differences("tiny-deberta-classifier", &[
        "deberta.embeddings.word_embeddings.weight",
        "deberta.encoder.rel_embeddings.weight",
        "deberta.encoder.LayerNorm.weight",
        "deberta.encoder.layer.0.attention.self.query_proj.weight",
        "deberta.encoder.layer.1.attention.self.query_proj.bias", // the fused q/k/v bias: key_proj's too
        "deberta.encoder.layer.1.attention.output.dense.weight",
        "deberta.encoder.layer.1.output.dense.weight",
        "pooler.dense.weight",
    ]);
}

/// DistilBERT's question answering drops the last hidden state before `qa_outputs` (`qa_dropout`,
/// `DistilBertForQuestionAnswering`): the head's gradient, and every one below it, through that mask. The word table
/// is left out: the batch's padding id 0 is DistilBERT's `pad_token_id`, whose row gets no gradient (`padding_idx`,
/// as transformers) though QA's loss, which reads the padded positions, sees it in a difference.
#[test]
fn distilbert_qa_dropout_gradients_match_finite_differences() {
    finite_differences_of("tiny-distilbert-qa", FineTuneTask::Qa, &[
        "distilbert.embeddings.position_embeddings.weight",
        "distilbert.transformer.layer.0.attention.q_lin.weight", // the fused q/k/v: k_lin and v_lin too
        "distilbert.transformer.layer.1.ffn.lin2.weight",
        "distilbert.transformer.layer.1.output_layer_norm.weight",
        "qa_outputs.weight",
    ]);
}

/// The answer spans of [`batch`]'s two sequences (the second has 6 real tokens).
const QA_START: [u32; 2] = [1, 2];
const QA_END: [u32; 2] = [3, 4];

/// `DistilBertForQuestionAnswering`'s head in the CPU backend's ops: `qa_outputs(dropout(hidden))` at the plan's
/// classifier probability on the head's stream, from the encoder's dropped forward. Ours gives those logits, and the
/// reference tells them apart from a head that does not drop. The probability is the checkpoint's `qa_dropout`
/// (transformers' default 0.1 where absent); BERT's question answering has no dropout there.
#[test]
fn distilbert_qa_head_drops_where_transformers_does() {
    let cpu = CpuBackend::new();
    let (cfg, w) = tiny("tiny-distilbert-qa");
    let bt = batch();
    let t = FineTuner::new(&cpu, &cfg, &w, FineTuneTask::Qa, None, 0).unwrap();
    let targets = Targets::Qa { start: &QA_START, end: &QA_END };
    let (_, ours) = t.gradients_with(&cpu, &bt, &targets, Some(PLAN)).unwrap();
    let ours = read(&cpu, &ours);
    let (last, _) = t.encoder.forward(&cpu, &bt, Some(PLAN)).unwrap();
    let qa = |n: &str, r, c| cpu.input(&w.stored(n).unwrap().to_f32().unwrap(), r, c).unwrap();
    let h = cfg.hidden_size;
    let head = |x: &CpuT| cpu.linear(x, &qa("qa_outputs.weight", 2, h), Some(&qa("qa_outputs.bias", 1, 2)), Activation::None)
        .unwrap().to_vec();
    let dropped = cpu.dropout(&last, Dropout { p: PLAN.classifier, seed: PLAN.seed, stream: HEAD_STREAM }).unwrap();
    let err = assert_close("DistilBERT's QA logits against qa_outputs(dropout(hidden))", &ours, &head(&dropped), 1e-6, 1e-6);
    let apart = ours.iter().zip(head(&last)).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    eprintln!("DistilBERT QA with dropout: max |err| {err:e}; a head without dropout is {apart:e} away");
    assert!(apart > 1e-2, "the reference cannot tell a dropped head from a plain one ({apart:e})");
    // The probability: the checkpoint's `qa_dropout` for DistilBERT's QA head, not its `seq_classif_dropout`.
    let mut cfg3 = cfg.clone();
    cfg3.qa_dropout = Some(0.3);
    let t3 = FineTuner::new(&cpu, &cfg3, &w, FineTuneTask::Qa, None, 0).unwrap();
    assert_eq!(t3.checkpoint_dropout(1).classifier, 0.3);
    let parsed = BertConfig::from_json_str(r#"{"model_type": "distilbert", "vocab_size": 100, "dim": 12, "n_layers": 1,
        "n_heads": 3, "hidden_dim": 24, "max_position_embeddings": 16}"#).unwrap();
    assert_eq!(parsed.qa_dropout, Some(0.1), "DistilBertConfig's default qa_dropout");
    let (bert, _) = tiny("tiny-classifier");
    assert_eq!(bert.qa_dropout, None, "BertForQuestionAnswering has no dropout before qa_outputs");
}

/// `DebertaV2ForSequenceClassification`'s head in the CPU backend's ops: the `ContextPooler` drops the first token at
/// `pooler_dropout` (the plan's `pooler`, on the stream before the head's) before `pooler.dense` and its activation,
/// then `cls_dropout` (the plan's `classifier`, on the head's stream) before `classifier`. Ours gives those logits; the
/// probabilities differ here, so a pooler site dropped at the classifier's probability, or not at all, is told apart.
/// (tests/dropout.rs's finite differences check the masked gradients, `pooler.dense.weight` included.)
#[test]
fn deberta_context_pooler_drops_where_transformers_does() {
    let cpu = CpuBackend::new();
    let (cfg, w) = tiny("tiny-deberta-classifier");
    let bt = batch();
    let plan = DropoutPlan { pooler: 0.5, classifier: 0.1, ..PLAN };
    let t = FineTuner::new(&cpu, &cfg, &w, FineTuneTask::Sequence, None, 0).unwrap();
    let labels = [1u32, 2];
    let (_, ours) = t.gradients_with(&cpu, &bt, &Targets::Sequence(&labels), Some(plan)).unwrap();
    let ours = read(&cpu, &ours);
    let (last, _) = t.encoder.forward(&cpu, &bt, Some(plan)).unwrap();
    let p = |n: &str| {
        let h = w.stored(n).unwrap_or_else(|| panic!("no {n}"));
        let (r, c) = if h.shape.len() == 2 { (h.shape[0], h.shape[1]) } else { (1, h.shape[0]) };
        cpu.input(&h.to_f32().unwrap(), r, c).unwrap()
    };
    let cls = cpu.gather_rows(&last, &[0, bt.t as u32]).unwrap();
    let head = |first: Option<f32>| {
        let x = match first {
            Some(p) => cpu.dropout(&cls, Dropout { p, seed: plan.seed, stream: HEAD_STREAM - 1 }).unwrap(),
            None => cls.clone(),
        };
        let pooled = cpu.linear(&x, &p("pooler.dense.weight"), Some(&p("pooler.dense.bias")), cfg.pooler_activation()).unwrap();
        let pooled = cpu.dropout(&pooled, Dropout { p: plan.classifier, seed: plan.seed, stream: HEAD_STREAM }).unwrap();
        cpu.linear(&pooled, &p("classifier.weight"), Some(&p("classifier.bias")), Activation::None).unwrap().to_vec()
    };
    let err = assert_close("DeBERTa's classifier logits against its ContextPooler's dropouts", &ours, &head(Some(plan.pooler)),
        1e-6, 1e-6);
    let apart = |other: Vec<f32>| ours.iter().zip(other).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let (at_cls, none) = (apart(head(Some(plan.classifier))), apart(head(None)));
    eprintln!("DeBERTa ContextPooler with dropout: max |err| {err:e}; at cls_dropout's probability {at_cls:e} away, \
        undropped {none:e}");
    assert!(at_cls > 1e-3 && none > 1e-3, "the reference cannot tell the pooler's dropout apart ({at_cls:e}, {none:e})");
}

fn finite_differences(model: &str, checked: &[&str]) {
    finite_differences_of(model, FineTuneTask::Sequence, checked)
}

fn finite_differences_of(model: &str, task: FineTuneTask, checked: &[&str]) {
    finite_differences_with(model, task, PLAN, checked)
}

fn finite_differences_with(model: &str, task: FineTuneTask, plan: DropoutPlan, checked: &[&str]) {
    let cpu = CpuBackend::new();
    let bt = batch();
    let labels = [1u32, 2];
    let targets = match task {
        FineTuneTask::Qa => Targets::Qa { start: &QA_START, end: &QA_END },
        _ => Targets::Sequence(&labels),
    };
    let mut t = tuner(&cpu, model, task);
    let (grads, _) = t.gradients_with(&cpu, &bt, &targets, Some(plan)).unwrap();
    let grads: Vec<Vec<f32>> = grads.iter().map(|g| read(&cpu, g.as_ref().unwrap())).collect();
    let (plain, _) = t.gradients_with(&cpu, &bt, &targets, None).unwrap();
    let plain: Vec<Vec<f32>> = plain.iter().map(|g| read(&cpu, g.as_ref().unwrap())).collect();
    let names: Vec<String> = t.encoder.params.iter().map(|p| p.names[0].clone()).collect();
    let pick = |n: &str| names.iter().position(|x| x == n).unwrap_or_else(|| panic!("no parameter {n}"));
    for (k, name) in checked.iter().enumerate() {
        let i = pick(name);
        let (rows, cols) = (t.encoder.params[i].rows, t.encoder.params[i].cols);
        let orig = read(&cpu, &t.encoder.params[i].tensor);
        // A random unit direction over the tensor.
        let mut dir = rand_vec(orig.len(), 100 + k as u64);
        let n = dir.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt() as f32;
        dir.iter_mut().for_each(|v| *v /= n);
        let mut at = |s: f32| {
            let moved: Vec<f32> = orig.iter().zip(&dir).map(|(&p, &d)| p + s * d).collect();
            t.encoder.params[i].tensor = cpu.input(&moved, rows, cols).unwrap();
            loss(&t, &cpu, &bt, &targets, Some(plan))
        };
        let fd = (at(FD_STEP) - at(-FD_STEP)) / (2.0 * FD_STEP as f64);
        t.encoder.params[i].tensor = cpu.input(&orig, rows, cols).unwrap();
        let dot = |g: &[f32]| g.iter().zip(&dir).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>();
        let (analytic, without) = (dot(&grads[i]), dot(&plain[i]));
        let rel = (fd - analytic).abs() / fd.abs().max(analytic.abs());
        let rel_plain = (fd - without).abs() / fd.abs().max(without.abs());
        eprintln!("{model} {name}: fd {fd:.6e} analytic {analytic:.6e} rel {rel:.2e} (no-dropout gradient: rel {rel_plain:.2e})");
        assert!(rel < FD_RTOL, "{name}: directional derivative {analytic:e}, finite difference {fd:e} ({rel:.2e})");
        assert!(rel_plain > FD_RTOL, "{name}: the check cannot tell the masked gradient from the plain one");
    }
}

#[test]
fn each_micro_batch_gets_new_masks_and_evaluation_none() {
    let cpu = CpuBackend::new();
    let bt = batch();
    let labels = [1u32, 2];
    let targets = Targets::Sequence(&labels);
    let opts = DropoutOptions { hidden: 0.1, attention: 0.1, classifier: 0.1, pooler: 0.1, embedding: 0.1, seed: 7 };
    // Each micro-batch's loss with micro-batch k's plan; and what a step over three micro-batches reports.
    let losses = |seed: u64| -> (Vec<f64>, f32) {
        let mut t = tuner(&cpu, "tiny-classifier", FineTuneTask::Sequence);
        let d = DropoutOptions { seed, ..opts };
        t.set_dropout(Some(d)).unwrap();
        let eval = read(&cpu, &t.logits(&cpu, &bt).unwrap());
        let each: Vec<f64> = (0..3).map(|k| loss(&t, &cpu, &bt, &targets, Some(d.plan(k)))).collect();
        for _ in 0..3 {
            pollster::block_on(t.accumulate(&cpu, &bt, &targets)).unwrap();
        }
        let step = pollster::block_on(t.apply(&cpu, &Default::default())).unwrap();
        // Evaluation does not drop: the logits are those of a tuner without dropout.
        let off = tuner(&cpu, "tiny-classifier", FineTuneTask::Sequence);
        assert_eq!(eval, read(&cpu, &off.logits(&cpu, &bt).unwrap()), "evaluation dropped");
        (each, step.loss)
    };
    let ((a, sa), (b, sb), (c, _)) = (losses(7), losses(7), losses(8));
    eprintln!("losses of 3 micro-batches, seed 7: {a:?} (step {sa}); seed 8: {c:?}");
    let mean = a.iter().sum::<f64>() / 3.0;
    assert!((sa as f64 - mean).abs() <= 1e-6 * mean.abs(), "the step's loss {sa} is the mean {mean} of micro-batches 0, 1, 2");
    assert_eq!((a.clone(), sa), (b, sb), "a seed gives the same masks");
    assert!(a[0] != a[1] && a[1] != a[2], "each micro-batch draws new masks");
    assert_ne!(a, c, "another seed, other masks");
    // The checkpoint's probabilities, and bad ones refused.
    let (cfg, _) = tiny("tiny-classifier");
    assert_eq!(DropoutOptions::of_config(&cfg, 0).hidden, cfg.hidden_dropout_prob);
    let mut t = tuner(&cpu, "tiny-classifier", FineTuneTask::Sequence);
    assert!(t.set_dropout(Some(DropoutOptions { hidden: 1.0, ..opts })).is_err());
    assert!(t.set_dropout(Some(DropoutOptions { attention: -0.1, ..opts })).is_err());
    assert!(t.set_dropout(Some(DropoutOptions { pooler: 1.0, ..opts })).is_err());
    assert!(t.set_dropout(Some(DropoutOptions { embedding: 1.0, ..opts })).is_err());
}
