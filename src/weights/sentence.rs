//! A sentence-transformers model's own files ([`crate::sentence`]) read beside its weights: the description, and
//! each Dense module's tensors (`{path}/model.safetensors`) under the names the model reads them by
//! ([`crate::sentence::DENSE_PREFIX`]). The loader (folder on disk, files fetched by the browser) and `convert`
//! (which carries them into a GGUF) both read through here.

use super::{HostTensor, Weights};
use crate::sentence::{Module, SentenceConfig, DENSE_PREFIX};
use crate::{Error, Result};

/// The description read through `read` (a path in the model folder → its bytes, `None` when absent) and the Dense
/// modules' tensors; `(None, [])` where the folder has none of sentence-transformers' files. A Dense module's
/// weights must be in `{path}/model.safetensors` (a `pytorch_model.bin` is refused by name: its pickle is not read).
pub fn read_sentence(hidden: usize, read: &mut dyn FnMut(&str) -> Result<Option<Vec<u8>>>)
    -> Result<(Option<SentenceConfig>, Vec<(String, HostTensor)>)> {
    let Some(st) = SentenceConfig::read(hidden, read)? else { return Ok((None, Vec::new())) };
    let mut tensors = Vec::new();
    for m in st.dense() {
        let Module::Dense { path, .. } = m else { continue };
        let file = format!("{path}/model.safetensors");
        let Some(bytes) = read(&file)? else {
            let bin = read(&format!("{path}/pytorch_model.bin"))?.is_some();
            return Err(Error::Weights(if bin {
                format!(
                    "the Dense module `{path}` has only pytorch_model.bin; bertgpu reads {file} (save it with \
                     safetensors' `save_file`)"
                )
            } else {
                format!("the Dense module `{path}` has no {file}")
            }));
        };
        let w = Weights::from_safetensors(&bytes).map_err(|e| Error::Weights(format!("{file}: {e}")))?;
        for name in w.names() {
            let t = w.stored(name).ok_or_else(|| Error::Weights(format!("{file}: {name} is unreadable")))?;
            tensors.push((format!("{DENSE_PREFIX}{path}.{name}"), t.clone()));
        }
    }
    Ok((Some(st), tensors))
}
