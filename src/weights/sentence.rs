//! A sentence-transformers model's own files ([`crate::sentence`]) read beside its weights: the description, and
//! each Dense module's tensors (`{path}/model.safetensors`, else the `{path}/pytorch_model.bin` older
//! sentence-transformers saved) under the names the model reads them by
//! ([`crate::sentence::DENSE_PREFIX`]). The loader (folder on disk, files fetched by the browser) and `convert`
//! (which carries them into a GGUF) both read through here.

use super::{HostTensor, Weights};
use crate::sentence::{Module, SentenceConfig, DENSE_PREFIX};
use crate::{Error, Result};

/// The description read through `read` (a path in the model folder → its bytes, `None` when absent) and the Dense
/// modules' tensors; `(None, [])` where the folder has none of sentence-transformers' files. A Dense module's
/// weights are `{path}/model.safetensors`, else `{path}/pytorch_model.bin` (its pickle read as data, never run).
pub fn read_sentence(hidden: usize, read: &mut dyn FnMut(&str) -> Result<Option<Vec<u8>>>)
    -> Result<(Option<SentenceConfig>, Vec<(String, HostTensor)>)> {
    let Some(st) = SentenceConfig::read(hidden, read)? else { return Ok((None, Vec::new())) };
    let mut tensors = Vec::new();
    for m in st.dense() {
        let Module::Dense { path, .. } = m else { continue };
        let file = format!("{path}/model.safetensors");
        let bin = format!("{path}/{}", super::torch_bin::FILE);
        let (file, w) = match read(&file)? {
            Some(bytes) => {
                let w = Weights::from_safetensors(&bytes).map_err(|e| Error::Weights(format!("{file}: {e}")))?;
                (file, w)
            }
            None => match read(&bin)? {
                Some(bytes) => {
                    let w = super::torch_bin::read_source(&bytes[..], &bin).map(super::torch_bin::into_weights)?;
                    (bin, w)
                }
                None => return Err(Error::Weights(format!("the Dense module `{path}` has neither {file} nor {bin}"))),
            },
        };
        for name in w.names() {
            let t = w.stored(name).ok_or_else(|| Error::Weights(format!("{file}: {name} is unreadable")))?;
            tensors.push((format!("{DENSE_PREFIX}{path}.{name}"), t.clone()));
        }
    }
    Ok((Some(st), tensors))
}
