//! The one list of activations: the fused epilogue of `linear` (encoder FFN, pooler, heads) and the derivative its
//! backward applies. Each has one name of ours (`name`, what a trained head's file records and `trainHead`'s
//! `activation` option takes), the Hugging Face `hidden_act` strings that mean it ([`Activation::from_hf`]), and the
//! code the shaders switch on (shaders/lib/activations.wgsl `activate(code, z)`).

use crate::{Error, Result};

/// The activation a `linear` applies after its bias. Serialized by [`Activation::name`] (a GGUF's copy of a
/// sentence-transformers Dense module records it so).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    None,
    /// Exact GELU: `x · Φ(x) = 0.5·x·(1 + erf(x/√2))` (`hidden_act: "gelu"`).
    Gelu,
    /// The tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    Relu,
    /// Used by the pooler (`BertPooler`: dense + tanh on `[CLS]`).
    Tanh,
    /// SiLU (swish): `x · σ(x)` (`hidden_act: "silu"`): NomicBERT's gate (SwiGLU).
    Silu,
}

impl Activation {
    pub const ALL: [Activation; 6] =
        [Activation::None, Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Tanh, Activation::Silu];

    /// `none`, `gelu`, `gelu_tanh`, `relu` or `tanh`: what a trained head's file records as `head_activation`.
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Silu => "silu",
        }
    }

    /// Maps a Hugging Face `hidden_act` string to the activation the backend applies.
    pub fn from_hf(name: &str) -> Result<Activation> {
        match name {
            // `gelu` in transformers is the exact erf form.
            "gelu" => Ok(Activation::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
            "relu" => Ok(Activation::Relu),
            "tanh" => Ok(Activation::Tanh),
            "silu" | "swish" => Ok(Activation::Silu),
            other => Err(Error::Config(format!(
                "hidden_act `{other}` is not supported; use one of gelu, gelu_new, gelu_pytorch_tanh, relu, silu"
            ))),
        }
    }

    /// The code `activate` / `activate_grad` in shaders/lib/activations.wgsl switch on.
    pub fn shader_code(self) -> u32 {
        match self {
            Activation::None => 0,
            Activation::Gelu => 1,
            Activation::GeluTanh => 2,
            Activation::Relu => 3,
            Activation::Tanh => 4,
            Activation::Silu => 5,
        }
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Activation {
    type Err = Error;
    /// An [`Activation::name`] other than `none` (the activations a head's hidden layer may have).
    fn from_str(s: &str) -> Result<Activation> {
        Activation::ALL.into_iter().find(|a| *a != Activation::None && a.name() == s).ok_or_else(|| {
            Error::Input(format!("unknown head activation `{s}`; use relu, gelu, gelu_tanh, tanh or silu"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_codes_are_distinct() {
        for a in Activation::ALL.into_iter().filter(|a| *a != Activation::None) {
            assert_eq!(a.name().parse::<Activation>().unwrap(), a);
        }
        assert!("none".parse::<Activation>().is_err());
        let mut codes: Vec<u32> = Activation::ALL.iter().map(|a| a.shader_code()).collect();
        codes.dedup();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn hugging_face_names() {
        assert_eq!(Activation::from_hf("gelu").unwrap(), Activation::Gelu);
        for s in ["gelu_new", "gelu_pytorch_tanh", "gelu_fast"] {
            assert_eq!(Activation::from_hf(s).unwrap(), Activation::GeluTanh);
        }
        for s in ["silu", "swish"] {
            assert_eq!(Activation::from_hf(s).unwrap(), Activation::Silu);
        }
        assert!(Activation::from_hf("mish").unwrap_err().to_string().contains("mish"));
    }
}
