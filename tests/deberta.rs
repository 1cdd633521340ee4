//! DeBERTa-v2/v3 against PyTorch `transformers` (tests/golden/deberta.json, made by tests/golden/deberta.py from the
//! tiny seeded checkpoints tests/models/tiny-deberta-*): its config (refusals by the key's name), its names
//! (`deberta.`, `attention.self.*_proj`, `lm_predictions.lm_head`, the `ContextPooler`), no absolute positions and no
//! token-type table (DeBERTa-v3's shape) or both (tiny-deberta-abs, the older shape without buckets), and the
//! disentangled attention (the kernel's disentangled input: content→position and position→content terms over the
//! LayerNorm'd relative table, its logarithmic buckets crossed by texts up to 60 tokens) in the embeddings of a padded
//! batch and of each text alone, fill-mask, sequence classification (pairs included), token classification and QA, on
//! the CPU and the GPU backend. Fine-tuning (no backward for it) is refused by name; `convert` to
//! GGUF runs (tests/gguf_families.rs).

mod common;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{AttentionKernel, Tuning};
use bertgpu::backend::Backend;
use bertgpu::config::{BertConfig, Family};
use bertgpu::tasks::Model;
use bertgpu::training::finetune::{FineTuneTask, FineTuner};
use bertgpu::weights::{HostTensor, Weights};
use common::family::{self, block_on, config_json, config_with, dir, embeddings_padded_and_alone, parse_config, refused};
use common::gpu;
use serde_json::{json, Value};

/// The CPU backend on f32 weights. Measured worst |ours − torch| here: 5.7e-6 (fill-mask and token-classification
/// logits; QA logits 5.7e-6, embeddings 2.9e-6, classifier logits 2.7e-6), printed by `cargo test --test deberta --
/// --nocapture`; 2e-5 is 3.5×. Far below what a mistake moves: without the relative terms the mean
/// embeddings move by 1.65 (the golden records it; `missing_relative_terms_are_caught` checks it here).
const CPU_ATOL: f32 = 2e-5;
/// The GPU. Measured worst on lavapipe here: 6.0e-6 (fill-mask logits; QA logits 5.7e-6, token logits 5.6e-6,
/// embeddings 3.6e-6); 2e-5 (3.3×). With the split attention kernels forced: 7.0e-6 (QA logits; 2.9×).
/// Without the split kernel's disentangled terms the first check (the MLM's mean embeddings) is off by 1.4.
const GPU_ATOL: f32 = 2e-5;

/// The fill-mask golden's smallest top-5 gap is 2.3e-4, above twice the pipeline score tolerance: the order must
/// match exactly.
const NEAR_TIES: bool = false;

fn golden() -> Value {
    family::golden("deberta.json")
}

fn load<B: Backend>(name: &str, backend: B) -> Model<B> {
    let m = family::load(&dir(name), backend);
    assert_eq!(m.config.family, Family::DebertaV2, "{name}");
    m
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    let longest = g["embeddings"].as_array().unwrap().iter().map(|c| c["input_ids"].as_array().unwrap().len()).max();
    assert!(longest > Some(2 * 16), "a text crosses the logarithmic buckets and the clamp: {longest:?}");
    let mlm = load("tiny-deberta-mlm", mk());
    // Embeddings in a padded batch and each text alone: the relative terms follow offsets over the padded length.
    embeddings_padded_and_alone("deberta (DebertaV2ForMaskedLM's encoder)", &g, "embeddings", &mlm, atol);
    family::fill_mask("deberta", &g, &mlm, atol, NEAR_TIES);
    family::classify("deberta", &g, &load("tiny-deberta-classifier", mk()), atol, true);
    let bare = load("tiny-deberta-model", mk());
    embeddings_padded_and_alone("deberta (DebertaV2Model)", &g, "model_embeddings", &bare, atol);
    let abs = load("tiny-deberta-abs", mk());
    assert!(abs.config.has_position_table() && abs.config.has_token_type_table());
    embeddings_padded_and_alone("deberta (absolute positions, no buckets)", &g, "abs_embeddings", &abs, atol);
    family::token_logits("deberta", &g, &load("tiny-deberta-ner", mk()), atol);
    family::answer("deberta", &g, &load("tiny-deberta-qa", mk()), atol);
}

#[test]
fn deberta_matches_pytorch_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn deberta_matches_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// The split attention kernels (each query over head_dim/4 invocations, the kernel the calibration picks on real
/// GPUs) with the disentangled terms, forced by the tuning: the whole model against PyTorch as above, with the
/// scores through workgroup memory and through subgroup shuffles (the tiny models' head_dim 8: two lanes a query,
/// which fit lavapipe's subgroups of 8), each check naming the module that ran.
#[test]
fn deberta_matches_pytorch_on_gpu_with_the_split_kernels() {
    if gpu().is_none() {
        return;
    }
    for (kernel, module) in [(AttentionKernel::Split, "attention_split"), (AttentionKernel::SplitSubgroup, "attention_split_sg")] {
        let mk = || {
            let g = gpu().expect("adapter");
            g.set_tuning(Tuning { attention: kernel, attention_wg: 64, ..Tuning::default() });
            g
        };
        let probe = mk();
        if module == "attention_split_sg" && !bertgpu::backend::gpu::split_subgroup_fits(&probe.gpu().info, 8) {
            eprintln!("no subgroups that fit a head of 8 on this adapter: {module} not run");
            continue;
        }
        everything(mk, GPU_ATOL);
        let m = load("tiny-deberta-model", probe);
        embeddings_padded_and_alone(&format!("deberta on {module}"), &golden(), "model_embeddings", &m, GPU_ATOL);
        let ran = m.backend.compiled_modules();
        assert!(ran.contains(&module) && !ran.iter().any(|n| n.starts_with("attention_vec4") || *n == "attention"),
            "the split kernel ran, and no per-query one: {ran:?}");
    }
}

/// transformers' `make_log_bucket_position` of every offset −300..300, for the tiny models' (8, 16) and
/// DeBERTa-v3-base's (256, 512).
#[test]
fn buckets_match_transformers() {
    for b in golden()["buckets"].as_array().unwrap() {
        let (size, max) = (b["size"].as_u64().unwrap() as usize, b["max_position"].as_u64().unwrap() as usize);
        let r = bertgpu::config::DebertaRelative { buckets: size, max_relative_positions: max, span: size, layer_norm: true };
        let (offsets, buckets) = (b["offsets"].as_array().unwrap(), b["buckets"].as_array().unwrap());
        assert_eq!((offsets.len(), buckets.len()), (601, 601));
        for (o, want) in offsets.iter().zip(buckets) {
            let o = o.as_i64().unwrap();
            assert_eq!(r.bucket(o), want.as_i64().unwrap(), "offset {o} with ({size}, {max})");
        }
    }
}

/// The same checkpoint with its relative table and LayerNorm zeroed is far from the golden, by as much as torch's
/// own zeroed model moved: the terms are applied, and the tolerance would see them missing.
#[test]
fn missing_relative_terms_are_caught() {
    let g = golden();
    let zeroed = |_: &mut BertConfig, w: &mut Weights| {
        for (name, shape) in [("encoder.rel_embeddings.weight", vec![16, 32]), ("encoder.LayerNorm.weight", vec![32]),
            ("encoder.LayerNorm.bias", vec![32])] {
            let n = shape.iter().product();
            w.insert(name, HostTensor::f32(shape, vec![0.0; n]).unwrap()); // a DebertaV2Model: at the root
        }
    };
    let m = family::load_edited(&dir("tiny-deberta-model"), CpuBackend::new(), zeroed);
    family::moved_without("deberta without the relative terms", &g["model_embeddings"], &m, 100.0 * CPU_ATOL,
        &g["without_relative_max_diff"]);
}

/// DeBERTa's configs: the family from `model_type` or the class; everything bertgpu does not run refused by the
/// key's name, never run otherwise.
#[test]
fn config_and_refusals() {
    let v = config_json("tiny-deberta-mlm");
    let c = parse_config(&v).unwrap();
    assert_eq!(c.family, Family::DebertaV2);
    assert!(!c.has_token_types() && !c.has_token_type_table() && !c.has_position_table());
    let r = c.deberta.as_ref().unwrap().relative.unwrap();
    assert_eq!((r.buckets, r.max_relative_positions, r.span, r.layer_norm), (8, 16, 8, true));
    assert_eq!(config_with(&v, "model_type", Value::Null).unwrap(), c, "the class names the family");
    assert_eq!(config_with(&v, "pos_att_type", json!("C2P|p2c")).unwrap(), c, "a string as DebertaV2Config splits it");
    for (k, val, says) in [("conv_kernel_size", json!(3), "`conv_kernel_size` 3"),
        ("pos_att_type", json!(["p2c", "c2p", "p2p"]), "`pos_att_type` entry `p2p`"),
        ("pos_att_type", json!(["c2p"]), "`pos_att_type` [\"c2p\"]"),
        ("norm_rel_ebd", json!("rms_norm"), "`norm_rel_ebd` `rms_norm`"),
        ("share_att_key", json!(false), "`share_att_key` false"),
        ("position_buckets", json!(64), "`position_buckets` 64"),
        ("embedding_size", json!(16), "`embedding_size` 16"),
        ("pooler_hidden_size", json!(16), "`pooler_hidden_size` 16"),
        ("architectures", json!(["DebertaV2ForPreTraining"]), "`DebertaV2ForPreTraining` is not a deberta-v2 class"),
        ("model_type", json!("deberta"), "model_type `deberta` is not supported")]
    {
        refused(config_with(&v, k, val), says);
    }
}

/// DeBERTa trains (tests/finetune_families.rs, tests/pretrain_families.rs), question answering included (its padded
/// queries as transformers masks them); its sequence classifier's dropouts are the config's: the ContextPooler's
/// `pooler_dropout` and `cls_dropout` (`hidden_dropout_prob` where absent), tests/dropout.rs checking where they drop.
#[test]
fn question_answering_trains_and_pooler_dropouts_follow_the_config() {
    let d = dir("tiny-deberta-qa");
    let cfg = BertConfig::from_file(d.join("config.json")).unwrap();
    let w = Weights::from_safetensors_file(d.join("model.safetensors")).unwrap();
    assert!(FineTuner::new(&CpuBackend::new(), &cfg, &w, FineTuneTask::Qa, None, 0).is_ok(), "question answering trains");
    let d = dir("tiny-deberta-classifier");
    let cfg = BertConfig::from_file(d.join("config.json")).unwrap();
    let w = Weights::from_safetensors_file(d.join("model.safetensors")).unwrap();
    assert!(FineTuner::new(&CpuBackend::new(), &cfg, &w, FineTuneTask::Sequence, None, 0).is_ok(), "classification trains");
    // The ContextPooler's dropouts: `pooler_dropout` before its dense layer, `cls_dropout` after it (the hidden
    // dropout where absent), as DebertaV2ForSequenceClassification; both train.
    let v = config_json("tiny-deberta-classifier");
    for (pooler, cls, want_cls) in [(json!(0.1), json!(0.2), 0.2f32), (json!(0.3), Value::Null, 0.05)] {
        let mut v = v.clone();
        v["pooler_dropout"] = pooler.clone();
        v["cls_dropout"] = cls;
        v["hidden_dropout_prob"] = json!(0.05);
        let cfg = parse_config(&v).unwrap();
        let mut t = FineTuner::new(&CpuBackend::new(), &cfg, &w, FineTuneTask::Sequence, None, 0).unwrap();
        let drop = t.checkpoint_dropout(0);
        assert_eq!((drop.pooler, drop.classifier), (pooler.as_f64().unwrap() as f32, want_cls), "{v}");
        assert!(t.set_dropout(Some(drop)).is_ok(), "the ContextPooler's dropouts train");
    }
}

/// The disentangled attention kernels against an f64 computation from the definition
/// (`Backend::attention_disentangled`), on both backends: every per-query kernel the GPU may pick for DeBERTa (the
/// scalar one for head_dim 3, vec4 for 12, attention_d32 and attention_d64), with padding, query counts off the CPU's
/// 4-row tiles and keys off its 8-key tiles. The bound is the attention kernels' own (tests/gpu_kernels.rs
/// `ATTENTION_ATOL` 2e-5 + 1e-5·|want|, a kernel test's bound for sums of up to 64 products of values up to 2 and a
/// softmax of up to 40 keys, not one run's error: measured 2.4e-7–4.8e-7 on the CPU, 2.5e-7–4.8e-7 on lavapipe).
#[test]
fn disentangled_kernels_match_the_definition() {
    const ATOL: f32 = 2e-5;
    const RTOL: f32 = 1e-5;
    let cases: &[(usize, usize, usize, usize, &[usize])] =
        &[(2, 7, 3, 3, &[7, 3]), (2, 9, 2, 12, &[9, 0]), (2, 33, 2, 32, &[33, 20]), (1, 40, 1, 64, &[37])];
    let gpu = gpu();
    for &(b, t, heads, d, lens) in cases {
        let h = heads * d;
        let r = 5; // rows of the projected table
        let qkv: Vec<f32> = bertgpu::testutil::rand_vec(b * t * 3 * h, (t * h) as u64).iter().map(|v| v * 2.0).collect();
        let pos: Vec<f32> = bertgpu::testutil::rand_vec(r * 3 * h, 7).iter().map(|v| v * 2.0).collect();
        let rows: Vec<f32> = (0..2 * t - 1).map(|c| ((c * 3 + 1) % r) as f32).collect();
        let mut mask = vec![0f32; b * t];
        for (bi, &l) in lens.iter().enumerate() {
            mask[bi * t..bi * t + l].fill(1.0);
        }
        let want = reference(&qkv, &mask, &pos, &rows, b, t, heads, d);
        let shape = bertgpu::backend::AttentionShape { batch: b, seq: t, heads, head_dim: d };
        let cpu = CpuBackend::new();
        let got = {
            let [q, m, p, i] = [(&qkv, b * t, 3 * h), (&mask, b, t), (&pos, r, 3 * h), (&rows, 1, 2 * t - 1)]
                .map(|(v, rr, cc)| cpu.input(v, rr, cc).unwrap());
            cpu.attention_disentangled(&q, &m, &p, &i, shape).unwrap().data().to_vec()
        };
        let worst = common::assert_close(&format!("cpu disentangled b{b} t{t} heads{heads} d{d}"), &got, &want, ATOL, RTOL);
        eprintln!("measured cpu disentangled attention b{b} t{t} heads{heads} d{d}: {worst:.2e}");
        if let Some(g) = &gpu {
            let [q, m, p, i] = [(&qkv, b * t, 3 * h), (&mask, b, t), (&pos, r, 3 * h), (&rows, 1, 2 * t - 1)]
                .map(|(v, rr, cc)| g.input(v, rr, cc).unwrap());
            let out = g.attention_disentangled(&q, &m, &p, &i, shape).unwrap();
            let got = common::read(g, &out);
            let worst = common::assert_close(&format!("gpu disentangled b{b} t{t} heads{heads} d{d}"), &got, &want, ATOL, RTOL);
            eprintln!("measured gpu disentangled attention b{b} t{t} heads{heads} d{d}: {worst:.2e}");
        }
    }
    // A row index outside pos is refused, not read.
    let cpu = CpuBackend::new();
    let shape = bertgpu::backend::AttentionShape { batch: 1, seq: 2, heads: 1, head_dim: 1 };
    let [q, m, p, i] = [(vec![0.5; 6], 2, 3), (vec![1.0; 2], 1, 2), (vec![0.1; 3], 1, 3), (vec![0.0, 1.0, 0.0], 1, 3)]
        .map(|(v, rr, cc)| cpu.input(&v, rr, cc).unwrap());
    let e = cpu.attention_disentangled(&q, &m, &p, &i, shape).unwrap_err().to_string();
    assert!(e.contains("attention rows"), "{e}");
}

/// The split kernels with the disentangled terms (`DISENTANGLED = 1` of attention_split.wgsl, scores through
/// workgroup memory and through subgroup shuffles) against the CPU twin, at each width the calibration times (32
/// with head_dim 64: two queries a workgroup; 256: every tile staged by more invocations than it holds), on f32 and
/// on f16 q, k, v and table (the f16 mode: pairs read and written, the table widened first). head_dim 12 has 3 lanes a
/// query (not a power of two: the subgroup tuning runs the workgroup one), 8 and 32 fit lavapipe's subgroups of 8,
/// 64 does not. Each case checks that the terms move the result, and the modules that ran are checked at the end.
#[test]
fn disentangled_split_kernels_match_cpu() {
    /// f32: the attention kernels' bound above (the terms are two more d-long dot products before the same softmax);
    /// measured worst on lavapipe 4.2e-7 (printed).
    const ATOL: f32 = 2e-5;
    const RTOL: f32 = 1e-5;
    /// f16: tests/f16_activations.rs's bounds (the output rounded to f16: one ulp, 2⁻¹⁰ relative, over O(1) values;
    /// the inputs are rounded before both backends see them). Measured worst |err| on lavapipe 4.8e-4 (an f16
    /// ulp is 4.9e-4 on [0.5, 1)).
    const F16_ATOL: f32 = 2e-4;
    const F16_RTOL: f32 = 1e-3;
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let f16 = |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect() };
    let cases: &[(usize, usize, usize, usize, &[usize])] =
        &[(2, 7, 4, 8, &[7, 3]), (2, 9, 2, 12, &[9, 0]), (2, 33, 2, 32, &[33, 20]), (1, 40, 1, 64, &[37])];
    let kernels = [(AttentionKernel::Split, 32), (AttentionKernel::Split, 64), (AttentionKernel::Split, 256),
        (AttentionKernel::SplitSubgroup, 32), (AttentionKernel::SplitSubgroup, 256)];
    let mut worst = (0f32, 0f32);
    for (kernel, wg) in kernels {
        g.set_tuning(Tuning { attention: kernel, attention_wg: wg, ..Tuning::default() });
        for &(b, t, heads, d, lens) in cases {
            let (h, r) = (heads * d, 5);
            let doubled = |n: usize, seed: u64| -> Vec<f32> {
                bertgpu::testutil::rand_vec(n, seed).iter().map(|v| v * 2.0).collect()
            };
            let (qkv, pos) = (f16(&doubled(b * t * 3 * h, (t * h) as u64)), f16(&doubled(r * 3 * h, 7)));
            let rows: Vec<f32> = (0..2 * t - 1).map(|c| ((c * 3 + 1) % r) as f32).collect();
            let mut mask = vec![0f32; b * t];
            for (bi, &l) in lens.iter().enumerate() {
                mask[bi * t..bi * t + l].fill(1.0);
            }
            let shape = bertgpu::backend::AttentionShape { batch: b, seq: t, heads, head_dim: d };
            let [q, m, p, i] = [(&qkv, b * t, 3 * h), (&mask, b, t), (&pos, r, 3 * h), (&rows, 1, 2 * t - 1)]
                .map(|(v, rr, cc)| cpu.input(v, rr, cc).unwrap());
            let want = cpu.attention_disentangled(&q, &m, &p, &i, shape).unwrap().data().to_vec();
            let plain = cpu.attention(&q, &m, shape).unwrap().data().to_vec();
            assert!(want.iter().zip(&plain).any(|(a, c)| (a - c).abs() > 1e-2), "the terms move the result");
            let (gm, gi) = (g.input(&mask, b, t).unwrap(), g.input(&rows, 1, 2 * t - 1).unwrap());
            for half in [false, true] {
                let what = format!("{kernel:?} {wg} f16 {half} b{b} t{t} heads{heads} d{d}");
                let (gq, gp) = if half {
                    (g.input_f16(&qkv, b * t, 3 * h).unwrap(), g.input_f16(&pos, r, 3 * h).unwrap())
                } else {
                    (g.input(&qkv, b * t, 3 * h).unwrap(), g.input(&pos, r, 3 * h).unwrap())
                };
                let got = common::read(&g, &g.attention_disentangled(&gq, &gm, &gp, &gi, shape).unwrap());
                if half {
                    worst.1 = worst.1.max(common::assert_close(&what, &got, &want, F16_ATOL, F16_RTOL));
                } else {
                    worst.0 = worst.0.max(common::assert_close(&what, &got, &want, ATOL, RTOL));
                }
            }
        }
    }
    eprintln!("measured split disentangled attention against the CPU: f32 {:.2e}, f16 {:.2e}", worst.0, worst.1);
    let ran = g.compiled_modules();
    let sg = bertgpu::backend::gpu::split_subgroup_fits(&g.gpu().info, 8);
    eprintln!("subgroups that fit a head of 8: {sg}; modules: {ran:?}");
    let subgroup_modules = if sg { &["attention_split_sg", "attention_split_sg_h"][..] } else { &[] };
    for module in ["attention_split", "attention_split_h"].iter().chain(subgroup_modules) {
        assert!(ran.contains(module), "{module} ran: {ran:?}");
    }
    assert!(!ran.iter().any(|n| n.starts_with("attention_vec4") || *n == "attention"), "no per-query kernel: {ran:?}");
}

/// `softmax((q_i·k_j + q_i·posK_r + k_j·posQ_r) / √(3d))·v` over the real keys, r = rows[j − i + T − 1], in f64.
#[allow(clippy::too_many_arguments)]
fn reference(qkv: &[f32], mask: &[f32], pos: &[f32], rows: &[f32], b: usize, t: usize, heads: usize, d: usize) -> Vec<f32> {
    let h = heads * d;
    let dot = |a: &[f32], c: &[f32]| a.iter().zip(c).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>();
    let mut out = vec![0f32; b * t * h];
    for bi in 0..b {
        for hd in 0..heads {
            let at = |row: usize, third: usize| &qkv[(bi * t + row) * 3 * h + third * h + hd * d..][..d];
            let pat = |row: usize, third: usize| &pos[row * 3 * h + third * h + hd * d..][..d];
            for i in 0..t {
                let keys: Vec<usize> = (0..t).filter(|&j| mask[bi * t + j] != 0.0).collect();
                if keys.is_empty() {
                    continue;
                }
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        let r = rows[j + t - 1 - i] as usize;
                        (dot(at(i, 0), at(j, 1)) + dot(at(i, 0), pat(r, 1)) + dot(at(j, 1), pat(r, 0))) / (3.0 * d as f64).sqrt()
                    })
                    .collect();
                let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                let sum: f64 = e.iter().sum();
                for c in 0..d {
                    let v: f64 = keys.iter().zip(&e).map(|(&j, &w)| w * at(j, 2)[c] as f64).sum();
                    out[(bi * t + i) * h + hd * d + c] = (v / sum) as f32;
                }
            }
        }
    }
    out
}

/// The engine's own GPU load of a DeBERTa folder: its matrices written into device memory as the file is read (the
/// q/k/v `*_proj` joined there, the relative table kept on the host for its LayerNorm), the load-time check against
/// the CPU backend passed (`device_reason` None), and the embeddings those of PyTorch.
#[test]
fn the_engine_places_a_deberta_on_the_gpu() {
    use bertgpu::engine::{Device, Engine};
    use bertgpu::loader::{LoadOptions, ModelSource};
    if gpu().is_none() {
        return;
    }
    let d = dir("tiny-deberta-model");
    let e = block_on(Engine::load(ModelSource::Path(&d), &LoadOptions::default(), Device::Gpu)).unwrap();
    assert_eq!((e.device(), e.device_reason()), ("gpu", None));
    family::engine_embeddings("deberta engine on the gpu", &e, &golden()["model_embeddings"], GPU_ATOL);
}
