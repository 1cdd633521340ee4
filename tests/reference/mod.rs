//! TEMPORARY: a straightforward f64-accumulating reference of the op set, used until the CPU backend lands;
//! then the GPU tests compare against `backend::cpu::CpuBackend` instead.

use bertgpu::backend::{Activation, AttentionShape, Backend, EmbeddingTables};
use bertgpu::tokenizer::Batch;
use bertgpu::weights::{HostData, HostTensor};
use bertgpu::Result;

pub struct Reference;

#[derive(Clone)]
pub struct T {
    d: Vec<f32>,
    r: usize,
    c: usize,
}

fn erf(x: f64) -> f64 {
    // Series / continued fraction via libm is not in std; use a high-accuracy rational (W. J. Cody) stand-in:
    // erf(x) = 1 - erfc(x), erfc from Numerical Recipes erfcc (|rel err| < 1.2e-7) is not enough for a reference,
    // so integrate exp(-t²) with Simpson's rule on 2000 panels (error ≪ 1e-9 for |x| ≤ 10).
    let a = x.abs().min(10.0);
    let n = 2000;
    let h = a / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(a);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    let v = s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt();
    if x < 0.0 { -v } else { v }
}

impl Backend for Reference {
    type Tensor = T;
    fn name(&self) -> &'static str {
        "reference"
    }
    fn upload(&self, t: &HostTensor) -> Result<T> {
        let HostData::F32(d) = &t.data else { unimplemented!() };
        let c = *t.shape.last().unwrap();
        Ok(T { d: d.clone(), r: d.len() / c, c })
    }
    fn input(&self, data: &[f32], rows: usize, cols: usize) -> Result<T> {
        Ok(T { d: data.to_vec(), r: rows, c: cols })
    }
    fn dims(&self, t: &T) -> (usize, usize) {
        (t.r, t.c)
    }
    fn embeddings(&self, b: &Batch, tb: &EmbeddingTables<'_, T>) -> Result<T> {
        let h = tb.word.c;
        let mut x = vec![0.0f32; b.b * b.t * h];
        for i in 0..b.b * b.t {
            let (id, ty, pos) = (b.input_ids[i] as usize, b.token_type_ids[i] as usize, i % b.t);
            for j in 0..h {
                x[i * h + j] = tb.word.d[id * h + j] + tb.position.d[pos * h + j] + tb.token_type.d[ty * h + j];
            }
        }
        self.layernorm(&T { d: x, r: b.b * b.t, c: h }, None, tb.ln_gamma, tb.ln_beta, tb.eps)
    }
    fn linear(&self, x: &T, w: &T, bias: Option<&T>, act: Activation) -> Result<T> {
        let (m, k, n) = (x.r, x.c, w.r);
        let mut y = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for l in 0..k {
                    s += x.d[i * k + l] as f64 * w.d[j * k + l] as f64;
                }
                if let Some(b) = bias {
                    s += b.d[j] as f64;
                }
                y[i * n + j] = match act {
                    Activation::None => s,
                    Activation::Gelu => 0.5 * s * (1.0 + erf(s / 2f64.sqrt())),
                    Activation::GeluTanh => {
                        0.5 * s * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (s + 0.044715 * s * s * s)).tanh())
                    }
                    Activation::Relu => s.max(0.0),
                    Activation::Tanh => s.tanh(),
                } as f32;
            }
        }
        Ok(T { d: y, r: m, c: n })
    }
    fn layernorm(&self, x: &T, res: Option<&T>, g: &T, b: &T, eps: f32) -> Result<T> {
        let (m, n) = (x.r, x.c);
        let mut y = vec![0.0f32; m * n];
        for i in 0..m {
            let v: Vec<f64> = (0..n).map(|j| x.d[i * n + j] as f64 + res.map_or(0.0, |r| r.d[i * n + j] as f64)).collect();
            let mean = v.iter().sum::<f64>() / n as f64;
            let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / n as f64;
            let rstd = 1.0 / (var + eps as f64).sqrt();
            for j in 0..n {
                y[i * n + j] = ((v[j] - mean) * rstd * g.d[j] as f64 + b.d[j] as f64) as f32;
            }
        }
        Ok(T { d: y, r: m, c: n })
    }
    fn mask(&self, b: &Batch) -> Result<T> {
        Ok(T { d: b.attention_mask.iter().map(|&v| v as f32).collect(), r: b.b, c: b.t })
    }
    fn attention(&self, qkv: &T, mask: &T, s: AttentionShape) -> Result<T> {
        let (bn, t, nh, d) = (s.batch, s.seq, s.heads, s.head_dim);
        let h = nh * d;
        let mut out = vec![0.0f32; bn * t * h];
        let at = |row: usize, col: usize| qkv.d[row * 3 * h + col] as f64;
        for b in 0..bn {
            for hh in 0..nh {
                for i in 0..t {
                    let mut sc = vec![f64::NEG_INFINITY; t];
                    for j in 0..t {
                        if mask.d[b * t + j] > 0.5 {
                            let mut dot = 0.0;
                            for c in 0..d {
                                dot += at(b * t + i, hh * d + c) * at(b * t + j, h + hh * d + c);
                            }
                            sc[j] = dot / (d as f64).sqrt();
                        }
                    }
                    let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    if mx == f64::NEG_INFINITY {
                        continue;
                    }
                    let e: Vec<f64> = sc.iter().map(|v| (v - mx).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        let mut acc = 0.0;
                        for j in 0..t {
                            acc += e[j] * at(b * t + j, 2 * h + hh * d + c);
                        }
                        out[(b * t + i) * h + hh * d + c] = (acc / sum) as f32;
                    }
                }
            }
        }
        Ok(T { d: out, r: bn * t, c: h })
    }
    fn mean_pool(&self, x: &T, mask: &T, batch: usize, seq: usize) -> Result<T> {
        let h = x.c;
        let mut y = vec![0.0f32; batch * h];
        for b in 0..batch {
            let cnt: f32 = (0..seq).map(|t| mask.d[b * seq + t]).sum();
            for c in 0..h {
                let mut s = 0.0f32;
                for t in 0..seq {
                    s += mask.d[b * seq + t] * x.d[(b * seq + t) * h + c];
                }
                y[b * h + c] = s / cnt.max(1e-9);
            }
        }
        Ok(T { d: y, r: batch, c: h })
    }
    fn gather_rows(&self, x: &T, rows: &[u32]) -> Result<T> {
        let d = rows.iter().flat_map(|&r| x.d[r as usize * x.c..(r as usize + 1) * x.c].to_vec()).collect();
        Ok(T { d, r: rows.len(), c: x.c })
    }
    async fn read(&self, t: &T) -> Result<Vec<f32>> {
        Ok(t.d.clone())
    }
}
