//! A weights file read as it downloads (`weights::stream`, what the browser does with `model.safetensors` and a
//! `.gguf`): in pieces of any size, its length announced or not, it must give exactly what the whole-file readers
//! give, the same SHA-256 as `sha256sum`, and the whole-file readers' errors for a file that is cut short, too long
//! or not what it claims. (The fuzz targets check the same agreement on every corpus input: tests/fuzz_corpus.rs.)

use std::path::{Path, PathBuf};

use bertgpu::dtype::Dtype;
use bertgpu::weights::gguf::{read_bert, tensors_from_safetensors, write_bert, BertGguf, BertGgufMeta};
use bertgpu::weights::stream::{read_file, Format, Streamed, WeightStream};
use bertgpu::weights::Weights;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every test checkpoint's `model.safetensors` (all the families, heads and dtypes the tests load).
fn checkpoints() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("tests/models"))
        .unwrap()
        .map(|e| e.unwrap().path().join("model.safetensors"))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    assert!(v.len() >= 20, "the test checkpoints are missing: run scripts/fetch-models.sh");
    v
}

/// `data` pushed in pieces of `piece` bytes, its length announced or not, then finished.
fn stream(format: Format, data: &[u8], piece: usize, announced: bool, hash: bool)
    -> bertgpu::Result<(Streamed, Option<String>)> {
    let mut s = WeightStream::new(format, announced.then_some(data.len()), 1 << 31, hash);
    for p in data.chunks(piece.max(1)) {
        s.push(p)?;
    }
    s.finish()
}

fn safetensors(data: &[u8], piece: usize, announced: bool) -> bertgpu::Result<Weights> {
    match stream(Format::Safetensors, data, piece, announced, false)?.0 {
        Streamed::Safetensors(w) => Ok(w),
        Streamed::Gguf(_) => panic!("a safetensors stream gave a GGUF"),
    }
}

fn gguf(data: &[u8], piece: usize, announced: bool) -> bertgpu::Result<BertGguf> {
    match stream(Format::Gguf, data, piece, announced, false)?.0 {
        Streamed::Gguf(g) => Ok(*g),
        Streamed::Safetensors(_) => panic!("a GGUF stream gave safetensors"),
    }
}

/// The pieces a download arrives in: 64 KiB (Chromium's usual), odd sizes that cut every header and tensor
/// somewhere, and the whole file at once.
const PIECES: [usize; 4] = [65536, 4093, 333, usize::MAX];

#[test]
fn every_checkpoint_streamed_is_the_file_read_whole() {
    for path in checkpoints() {
        let data = std::fs::read(&path).unwrap();
        let whole = Weights::from_safetensors(&data).unwrap();
        for piece in PIECES {
            for announced in [true, false] {
                let got = safetensors(&data, piece, announced).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(got == whole, "{}: pieces of {piece}, announced {announced}: the tensors differ", path.display());
            }
        }
    }
}

/// A tensor in a dtype we do not read (the i64 `position_ids` of older checkpoints) is recorded by name, as the
/// whole-file reader records it, and refused only when asked for; an empty tensor is read as one.
#[test]
fn unread_dtypes_and_empty_tensors_are_read_as_whole_files_are() {
    use safetensors::tensor::{serialize, TensorView};
    use safetensors::Dtype as St;
    let a: Vec<u8> = [1f32, -2.5, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let ids: Vec<u8> = [0i64, 1, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
    let views = [
        ("a", TensorView::new(St::F32, vec![3], &a).unwrap()),
        ("embeddings.position_ids", TensorView::new(St::I64, vec![1, 3], &ids).unwrap()),
        ("empty", TensorView::new(St::F16, vec![0], &[]).unwrap()),
    ];
    let data = serialize(views, None).unwrap();
    let whole = Weights::from_safetensors(&data).unwrap();
    for piece in [1, 5, usize::MAX] {
        for announced in [true, false] {
            let got = safetensors(&data, piece, announced).unwrap();
            assert!(got == whole, "pieces of {piece}: differ");
            let e = got.get("embeddings.position_ids", &[1, 3]).expect_err("an i64 tensor is refused").to_string();
            assert!(e.contains("I64"), "{e}");
            assert_eq!(got.get("a", &[3]).unwrap().to_f32().unwrap(), [1.0, -2.5, 3.0]);
            assert_eq!(got.get("empty", &[0]).unwrap().numel(), 0);
        }
    }
}

/// The tiny classifier as a GGUF of `dtype`, its tokenizer.json padded with `pad` bytes of JSON whitespace (a header
/// past the stream's first 2 MiB try).
fn tiny_gguf(dtype: Dtype, pad: usize) -> Vec<u8> {
    let dir = root().join("tests/models/tiny-classifier");
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let tok = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap() + &" ".repeat(pad);
    let tensors = tensors_from_safetensors(&std::fs::read(dir.join("model.safetensors")).unwrap()).unwrap();
    let meta = BertGgufMeta { name: "tiny", config_json: &config, tokenizer_json: &tok, tokenizer_config_json: None, pooling: Some("cls") };
    write_bert(&meta, &tensors, dtype).unwrap()
}

#[test]
fn ggufs_streamed_are_the_files_read_whole() {
    let files = [
        ("llama.cpp's", std::fs::read(root().join("tests/golden/llamacpp_tiny_bert.gguf")).unwrap()),
        ("Q8_0", tiny_gguf(Dtype::Q8_0, 0)),
        ("Q4_0", tiny_gguf(Dtype::Q4_0, 0)),
        ("f16, a 3 MiB header", tiny_gguf(Dtype::F16, 3 << 20)),
    ];
    for (what, data) in &files {
        let whole = read_bert(data).unwrap();
        for piece in PIECES {
            for announced in [true, false] {
                let got = gguf(data, piece, announced).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(got.tensors == whole.tensors, "{what}, pieces of {piece}: the tensors differ");
                assert_eq!(got.config_json, whole.config_json);
                assert_eq!(got.tokenizer_json, whole.tokenizer_json);
                assert_eq!((&got.vocab, got.pooling), (&whole.vocab, whole.pooling));
            }
        }
    }
}

/// Natively, a model folder's `model.safetensors` and a `.gguf` path are read from disk through the same stream, a
/// piece at a time (`stream::read_file`): the same tensors as the whole file parsed at once, and a file cut short
/// is the whole-file reader's error.
#[test]
fn files_on_disk_read_in_pieces_are_the_files_read_whole() {
    let dir = std::env::temp_dir().join(format!("bertgpu-stream-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for path in checkpoints().iter().take(3) {
        let whole = Weights::from_safetensors(&std::fs::read(path).unwrap()).unwrap();
        assert!(Weights::from_safetensors_file(path).unwrap() == whole, "{}", path.display());
    }
    let data = tiny_gguf(Dtype::Q8_0, 0);
    let file = dir.join("tiny.gguf");
    std::fs::write(&file, &data).unwrap();
    let Streamed::Gguf(got) = read_file(&file, Format::Gguf).unwrap() else { panic!("a GGUF read gave safetensors") };
    assert!(got.tensors == read_bert(&data).unwrap().tensors);
    std::fs::write(&file, &data[..data.len() - 100]).unwrap();
    let (Err(piecewise), Err(whole)) = (read_file(&file, Format::Gguf), read_bert(&data[..data.len() - 100])) else {
        panic!("a GGUF cut short was read")
    };
    assert_eq!(piecewise.to_string(), whole.to_string());
    let st = std::fs::read(&checkpoints()[0]).unwrap();
    let cut = dir.join("model.safetensors");
    std::fs::write(&cut, &st[..st.len() / 2]).unwrap();
    let err = Weights::from_safetensors_file(&cut).unwrap_err().to_string();
    assert!(err.contains("model.safetensors") && err.contains("truncated"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The digest a pinned file is checked with is computed as the pieces pass: it must be the file's SHA-256 as
/// `sha256sum` computes it.
#[test]
fn the_digest_is_sha256sum_s() {
    let path = root().join("tests/models/tiny-classifier/model.safetensors");
    let data = std::fs::read(&path).unwrap();
    let out = std::process::Command::new("sha256sum").arg(&path).output().expect("sha256sum (coreutils)");
    let want = String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string();
    assert_eq!(want.len(), 64);
    for piece in [1000, usize::MAX] {
        let (_, digest) = stream(Format::Safetensors, &data, piece, true, true).unwrap();
        assert_eq!(digest.as_deref(), Some(want.as_str()));
    }
    assert_eq!(stream(Format::Safetensors, &data, 1000, true, false).unwrap().1, None);
}

/// A file cut short, longer than announced or than its header says, or not of its format is refused with the
/// whole-file reader's kind of error, never a panic.
#[test]
fn bad_files_are_refused_as_whole_files_are() {
    let data = std::fs::read(root().join("tests/models/tiny-classifier/model.safetensors")).unwrap();
    let err = |r: bertgpu::Result<Weights>| r.expect_err("refused").to_string();
    // Cut short: announced (the stream knows at once when it ends early) or not.
    for cut in [5, 100, data.len() / 2, data.len() - 1] {
        for announced in [true, false] {
            let mut s = WeightStream::new(Format::Safetensors, announced.then_some(data.len()), 1 << 31, false);
            s.push(&data[..cut]).unwrap();
            let e = s.finish().err().expect("a cut file is refused").to_string();
            assert!(e.contains("truncated") || e.contains("not a valid safetensors"), "cut at {cut}: {e}");
        }
    }
    // More bytes than announced, or than the header describes.
    let mut s = WeightStream::new(Format::Safetensors, Some(data.len() - 1), 1 << 31, false);
    assert!(s.push(&data).is_err());
    let mut longer = data.clone();
    longer.extend_from_slice(&[0; 9]);
    assert!(err(safetensors(&longer, 4093, false)).contains("not a valid safetensors"));
    assert!(Weights::from_safetensors(&longer).is_err());
    // Over the limit (`maxBytes`), said by the header before any tensor arrives.
    let header_end = 8 + u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
    let mut s = WeightStream::new(Format::Safetensors, None, data.len() - 1, false);
    let e = s.push(&data[..header_end]).expect_err("over the limit").to_string();
    assert!(e.contains("bytes allowed"), "{e}");
    // Not a safetensors file; not a GGUF.
    assert!(err(safetensors(b"GGUF and some more bytes", 3, false)).contains("not a valid safetensors"));
    let e = gguf(&data, 4093, true).expect_err("not a GGUF").to_string();
    assert!(e.contains("not a GGUF file"), "{e}");
    // A GGUF cut inside its header and inside its tensors.
    let g = tiny_gguf(Dtype::Q8_0, 0);
    let data_start = read_bert(&g).unwrap().header.tensors.iter().map(|t| t.start).min().unwrap();
    for cut in [3, 200, data_start + 10] {
        assert!(read_bert(&g[..cut]).is_err());
        for announced in [true, false] {
            let mut s = WeightStream::new(Format::Gguf, announced.then_some(g.len()), 1 << 31, false);
            s.push(&g[..cut]).unwrap();
            let e = s.finish().err().expect("a cut GGUF is refused").to_string();
            assert!(e.contains("truncated"), "cut at {cut}: {e}");
        }
    }
}
