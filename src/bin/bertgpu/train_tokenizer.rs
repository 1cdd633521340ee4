//! `bertgpu train-tokenizer`: a BERT WordPiece vocabulary trained on a corpus ([`bertgpu::tokenizer::train`]),
//! written as the tokenizer files of a Hugging Face folder.

use std::path::Path;

use bertgpu::tokenizer::train::{corpus_texts, train_wordpiece, WordPieceOptions};

use crate::Fail;

fn fail(what: impl std::fmt::Display) -> Fail {
    Fail::Model(format!("train-tokenizer: {what}"))
}

/// Reads the corpus (`.jsonl`: each line's "text"; otherwise one text per line), trains, writes the four files into
/// `out` (made if missing) and prints what it wrote on stderr.
pub(crate) fn cmd_train_tokenizer(data: &Path, out: &Path, opts: &WordPieceOptions) -> Result<(), Fail> {
    let text = std::fs::read_to_string(data).map_err(|e| fail(format!("cannot read `{}`: {e}", data.display())))?;
    let jsonl = data.extension().is_some_and(|e| e == "jsonl");
    let texts = corpus_texts(&text, jsonl).map_err(|e| fail(format!("{}: {e}", data.display())))?;
    let trained = train_wordpiece(&texts, opts).map_err(|e| fail(format!("{}: {e}", data.display())))?;
    std::fs::create_dir_all(out).map_err(|e| fail(format!("cannot create `{}`: {e}", out.display())))?;
    for (name, contents) in trained.files() {
        let path = out.join(name);
        std::fs::write(&path, contents).map_err(|e| fail(format!("cannot write `{}`: {e}", path.display())))?;
    }
    eprintln!(
        "wrote {} (tokenizer.json, vocab.txt, tokenizer_config.json, special_tokens_map.json): {} tokens from {} texts",
        out.display(),
        trained.vocab.len(),
        texts.len()
    );
    Ok(())
}
