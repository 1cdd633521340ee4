//! Head training end to end on the CPU backend with all-MiniLM-L6-v2: accuracy on held-out real text, determinism,
//! export/load, and clear errors for bad input. The GPU twin of the training loop is checked in train_gpu.rs.

use bertgpu::engine::{Device, Engine};

use bertgpu::tasks::{TrainExample, TrainOptions};

fn engine() -> Engine {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/models/all-MiniLM-L6-v2");
    pollster::block_on(Engine::from_dir(dir, Device::Cpu)).expect("models/all-MiniLM-L6-v2 (scripts/fetch-models.sh)")
}

fn load(name: &str) -> Vec<TrainExample> {
    let path = format!("{}/tests/data/fortunes/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a {text, label} line"))
        .collect()
}

fn accuracy(e: &Engine, test: &[TrainExample]) -> f32 {
    let encoded: Vec<_> = test.iter().map(|x| e.tokenizer().encode(&x.text, None).unwrap()).collect();
    let preds = pollster::block_on(e.classify_with_head(&encoded, Some(1))).unwrap();
    let correct = preds.iter().zip(test).filter(|(p, x)| p[0].label == x.label).count();
    correct as f32 / test.len() as f32
}

/// 4 categories of quotations, 128 training examples. Chance is 25%; the full 5-category run in BENCHMARKS.md
/// reaches ~91% (PyTorch the same within 2 points). This small split measured 87.5% (28/32); a bar of 65% (21/32)
/// leaves room for a few examples flipping under another platform's float rounding while still failing a head
/// that learns little (or a broken gradient: an untrained head scores near chance).
const MIN_ACCURACY: f32 = 0.65;

#[test]
fn trains_on_real_text_and_round_trips() {
    let e = engine();
    let (train, test) = (load("train"), load("test"));
    let opts = TrainOptions { epochs: 30, learning_rate: 1e-2, seed: 3, ..Default::default() };
    let mut events = Vec::new();
    let report = pollster::block_on(e.train_head(&train, &opts, |p| events.push(p.clone()))).unwrap();
    let mut first_seen: Vec<String> = Vec::new();
    train.iter().for_each(|x| if !first_seen.contains(&x.label) { first_seen.push(x.label.clone()) });
    assert_eq!(report.labels, first_seen);
    assert_eq!(report.labels.len(), 4);
    assert_eq!(events.len(), report.history.len());
    assert!(events.iter().all(|p| p.val_loss.is_some()));
    assert!(events.last().unwrap().loss < events[0].loss, "training loss did not fall: {events:?}");
    let acc = accuracy(&e, &test);
    eprintln!("held-out accuracy {acc} (kept epoch {})", report.best_epoch);
    assert!(acc >= MIN_ACCURACY, "held-out accuracy {acc} < {MIN_ACCURACY}");

    // Export → load into a fresh engine → the same predictions.
    let bytes = e.export_head().unwrap();
    let e2 = engine();
    assert!(e2.export_head().is_err(), "a fresh engine has no head");
    e2.load_head(&bytes).unwrap();
    assert_eq!(accuracy(&e2, &test), acc);
    assert!(e2.export_head().unwrap() == bytes, "export after load differs");

    // Deterministic: the same seed gives the same head, bit for bit.
    pollster::block_on(e2.train_head(&train, &opts, |_| {})).unwrap();
    assert!(e2.export_head().unwrap() == bytes, "the same seed gave another head");
    // Another seed gives another head.
    let other = TrainOptions { seed: 4, ..opts };
    pollster::block_on(e2.train_head(&train, &other, |_| {})).unwrap();
    assert!(e2.export_head().unwrap() != bytes, "another seed gave the same head");
}

#[test]
fn labels_follow_first_appearance_or_the_given_order() {
    let e = engine();
    let ex = |t: &str, l: &str| TrainExample { text: t.into(), label: l.into() };
    let data = vec![ex("the court ruled", "law"), ex("a tasty soup", "food"), ex("the judge", "law"), ex("bread", "food")];
    let opts = TrainOptions { epochs: 2, validation_split: 0.0, ..Default::default() };
    let r = pollster::block_on(e.train_head(&data, &opts, |_| {})).unwrap();
    assert_eq!(r.labels, ["law", "food"]);
    assert!(r.history.iter().all(|p| p.val_loss.is_none()));
    let given = TrainOptions { labels: Some(vec!["food".into(), "law".into(), "sports".into()]), ..opts.clone() };
    let r = pollster::block_on(e.train_head(&data, &given, |_| {})).unwrap();
    assert_eq!(r.labels, ["food", "law", "sports"]);
    // A hidden layer trains too and survives the round trip.
    let hidden = TrainOptions { hidden: Some(8), ..opts };
    pollster::block_on(e.train_head(&data, &hidden, |_| {})).unwrap();
    let bytes = e.export_head().unwrap();
    e.load_head(&bytes).unwrap();
    assert!(e.export_head().unwrap() == bytes, "hidden-layer head round trip");
}

#[test]
fn bad_input_is_a_clear_error() {
    let e = engine();
    let ex = |t: &str, l: &str| TrainExample { text: t.into(), label: l.into() };
    let two = vec![ex("a", "x"), ex("b", "y"), ex("c", "x")];
    let opts = TrainOptions { validation_split: 0.0, epochs: 1, ..Default::default() };
    let err = |data: &[TrainExample], o: &TrainOptions| {
        pollster::block_on(e.train_head(data, o, |_| {})).unwrap_err().to_string()
    };
    assert!(err(&[ex("a", "x"), ex("b", "x")], &opts).contains("at least 2 labels"));
    assert!(err(&[ex("a", "x"), ex("  ", "y")], &opts).contains("empty text"));
    assert!(err(&two, &TrainOptions { epochs: 0, ..opts.clone() }).contains("epochs must be at least 1"));
    let only_x = TrainOptions { labels: Some(vec!["x".into(), "z".into()]), ..opts.clone() };
    assert!(err(&two, &only_x).contains("not in the given `labels`"));
    assert!(err(&two, &TrainOptions { learning_rate: -1.0, ..opts.clone() }).contains("learning rate"));
    assert!(err(&two, &TrainOptions { validation_split: 1.0, ..opts.clone() }).contains("validation split"));
    // classify before any head; a head for another hidden size; garbage bytes.
    let enc = vec![e.tokenizer().encode("hello", None).unwrap()];
    assert!(pollster::block_on(e.classify_with_head(&enc, None)).unwrap_err().to_string().contains("no classification head"));
    let spec = bertgpu::training::head::HeadSpec {
        input_size: 128,
        hidden: None,
        labels: vec!["a".into(), "b".into()],
        pooling: bertgpu::tasks::Pooling::Mean,
    };
    let host = spec.init(&mut bertgpu::training::rng::SplitMix64::new(0));
    let bytes = bertgpu::training::head::export_safetensors(&spec, &host).unwrap();
    let msg = e.load_head(&bytes).unwrap_err().to_string();
    assert!(msg.contains("size 128") && msg.contains("384"), "{msg}");
    assert!(e.load_head(b"garbage").is_err());
}
