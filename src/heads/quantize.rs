//! Smaller encodings of embeddings, as sentence-transformers' `quantize_embeddings`
//! (`sentence_transformers/util/quantization.py`) computes them, value for value:
//!
//! - `int8` / `uint8`: per dimension, the range `[min, max]` cut into 255 equal steps; a value's step number
//!   `floor((x − min) / step)` clipped to 0..=255 (less 128 for int8). The ranges come from a representative set of
//!   vectors (a calibration set), or from the vectors being quantized where none is given (as sentence-transformers
//!   does; it needs two vectors at least, and does better with hundreds).
//! - `binary` / `ubinary`: one bit per dimension, set where the value is above 0, packed eight to a byte with the
//!   first dimension in the highest bit (numpy's `packbits`), the last byte padded with zeros; `binary` is each byte
//!   less 128 as a signed byte.
//!
//! All in f32 as numpy computes it, so the same float vectors give the same codes.

use crate::{Error, Result};

/// The encoding of a quantized vector (sentence-transformers' `precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum Precision {
    #[default]
    Float32,
    Int8,
    Uint8,
    Binary,
    Ubinary,
}

impl Precision {
    pub const ALL: [Precision; 5] =
        [Precision::Float32, Precision::Int8, Precision::Uint8, Precision::Binary, Precision::Ubinary];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Float32 => "float32",
            Precision::Int8 => "int8",
            Precision::Uint8 => "uint8",
            Precision::Binary => "binary",
            Precision::Ubinary => "ubinary",
        }
    }

    /// Whether the encoding needs per-dimension ranges (int8, uint8).
    pub fn needs_ranges(self) -> bool {
        matches!(self, Precision::Int8 | Precision::Uint8)
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Precision::ALL.iter().map(|p| p.name()).collect();
            Error::Input(format!("unknown precision `{s}`; use one of {}", names.join(", ")))
        })
    }
}

/// Quantized vectors: signed bytes (int8, binary) or unsigned (uint8, ubinary); float32 as it was.
#[derive(Clone, Debug, PartialEq)]
pub enum Quantized {
    Float32(Vec<Vec<f32>>),
    Int8(Vec<Vec<i8>>),
    Uint8(Vec<Vec<u8>>),
}

/// Per-dimension ranges of int8 / uint8 quantization: sentence-transformers' `ranges`, `(2, dim)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranges {
    pub min: Vec<f32>,
    pub max: Vec<f32>,
}

impl Ranges {
    /// The smallest and largest value of each dimension over `vectors` (a calibration set): at least two vectors,
    /// all of one width.
    pub fn of(vectors: &[Vec<f32>]) -> Result<Ranges> {
        if vectors.len() < 2 {
            return Err(Error::Input(format!(
                "int8 and uint8 ranges cannot come from {} vector{}: give ranges, or calibration vectors from a \
                 representative set (hundreds of texts)",
                vectors.len(),
                if vectors.len() == 1 { "" } else { "s" }
            )));
        }
        let dim = width(vectors)?;
        let mut r = Ranges { min: vec![f32::INFINITY; dim], max: vec![f32::NEG_INFINITY; dim] };
        for v in vectors {
            for (j, &x) in v.iter().enumerate() {
                r.min[j] = r.min[j].min(x);
                r.max[j] = r.max[j].max(x);
            }
        }
        Ok(r)
    }

    fn check(&self, dim: usize) -> Result<()> {
        if self.min.len() != dim || self.max.len() != dim {
            return Err(Error::Input(format!(
                "the ranges have {} minimums and {} maximums for vectors of {dim} values",
                self.min.len(),
                self.max.len()
            )));
        }
        if let Some(j) = (0..dim).find(|&j| !(self.min[j].is_finite() && self.max[j].is_finite())) {
            return Err(Error::Input(format!("the ranges of dimension {j} are not finite numbers")));
        }
        Ok(())
    }
}

/// The one width of `vectors` (an error where they differ or one is empty).
fn width(vectors: &[Vec<f32>]) -> Result<usize> {
    let dim = vectors.first().map_or(0, Vec::len);
    if let Some(i) = vectors.iter().position(|v| v.len() != dim || v.is_empty()) {
        return Err(Error::Input(format!(
            "vector {i} has {} values where the first has {dim}: quantize vectors of one width",
            vectors[i].len()
        )));
    }
    Ok(dim)
}

/// `vectors` in `precision`; int8 and uint8 use `ranges`, or the vectors' own where `None` (see the module
/// documentation).
pub fn quantize(vectors: Vec<Vec<f32>>, precision: Precision, ranges: Option<&Ranges>) -> Result<Quantized> {
    if vectors.is_empty() {
        return Ok(match precision {
            Precision::Float32 => Quantized::Float32(vectors),
            Precision::Int8 | Precision::Binary => Quantized::Int8(Vec::new()),
            Precision::Uint8 | Precision::Ubinary => Quantized::Uint8(Vec::new()),
        });
    }
    let dim = width(&vectors)?;
    if let Some(i) = vectors.iter().position(|v| v.iter().any(|x| !x.is_finite())) {
        return Err(Error::Input(format!("vector {i} holds a value that is not a finite number")));
    }
    Ok(match precision {
        Precision::Float32 => Quantized::Float32(vectors),
        Precision::Int8 | Precision::Uint8 => {
            let own;
            let r = match ranges {
                Some(r) => r,
                None => {
                    own = Ranges::of(&vectors)?;
                    &own
                }
            };
            r.check(dim)?;
            // numpy in f32: steps = (max − min) / 255, a zero step taken as 1; floor((x − min) / step) in 0..=255.
            let steps: Vec<f32> = (0..dim)
                .map(|j| {
                    let s = (r.max[j] - r.min[j]) / 255.0;
                    if s == 0.0 { 1.0 } else { s }
                })
                .collect();
            let code = |v: &[f32], j: usize| ((v[j] - r.min[j]) / steps[j]).floor().clamp(0.0, 255.0) as u8;
            if precision == Precision::Uint8 {
                Quantized::Uint8(vectors.iter().map(|v| (0..dim).map(|j| code(v, j)).collect()).collect())
            } else {
                Quantized::Int8(
                    vectors.iter().map(|v| (0..dim).map(|j| (code(v, j) as i16 - 128) as i8).collect()).collect(),
                )
            }
        }
        Precision::Binary | Precision::Ubinary => {
            let packed: Vec<Vec<u8>> = vectors
                .iter()
                .map(|v| {
                    v.chunks(8)
                        .map(|c| c.iter().enumerate().fold(0u8, |b, (k, &x)| b | (((x > 0.0) as u8) << (7 - k))))
                        .collect()
                })
                .collect();
            if precision == Precision::Ubinary {
                Quantized::Uint8(packed)
            } else {
                Quantized::Int8(packed.into_iter().map(|v| v.into_iter().map(|b| (b as i16 - 128) as i8).collect()).collect())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_bits_as_numpy_does() {
        let v = vec![vec![1.0, -1.0, 0.0, 2.0, 0.5, -0.5, 3.0, 0.1, 4.0]];
        // 1 0 0 1 1 0 1 1 | 1 (padded) → 0b1001_1011 = 155, 0b1000_0000 = 128
        assert_eq!(quantize(v.clone(), Precision::Ubinary, None).unwrap(), Quantized::Uint8(vec![vec![155, 128]]));
        assert_eq!(quantize(v, Precision::Binary, None).unwrap(), Quantized::Int8(vec![vec![27, 0]]));
    }

    #[test]
    fn refuses_what_cannot_be_quantized() {
        let e = quantize(vec![vec![1.0, 2.0]], Precision::Int8, None).unwrap_err().to_string();
        assert!(e.contains("cannot come from 1 vector"), "{e}");
        let e = quantize(vec![vec![1.0, 2.0], vec![1.0]], Precision::Binary, None).unwrap_err().to_string();
        assert!(e.contains("vector 1 has 1 values where the first has 2"), "{e}");
        let r = Ranges { min: vec![0.0], max: vec![1.0] };
        let e = quantize(vec![vec![1.0, 2.0]; 2], Precision::Uint8, Some(&r)).unwrap_err().to_string();
        assert!(e.contains("1 minimums and 1 maximums for vectors of 2 values"), "{e}");
        assert!("int4".parse::<Precision>().unwrap_err().to_string().contains("float32, int8, uint8, binary, ubinary"));
    }
}
