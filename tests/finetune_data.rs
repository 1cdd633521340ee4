//! Fine-tuning examples → batches (src/training/data.rs) against transformers' example scripts
//! (tests/golden/finetune_data.py → finetune_data.json): run_ner's `tokenize_and_align_labels`, run_qa's
//! `prepare_train_features`, run_glue's tokenization; ids, masks and labels compared exactly. Then the errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bertgpu::config::BertConfig;
use bertgpu::tokenizer::{Batch, Tokenizer};
use bertgpu::training::data::{
    parse_jsonl, qa_batch, sequence_batch, sequence_label_list, token_batch, token_label_list, QaAnswers, QaExample,
    TextExample, TokenExample, QA_DOC_STRIDE, QA_MAX_LENGTH,
};
use bertgpu::training::loss::IGNORE;
use bertgpu::Error;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn model(name: &str) -> PathBuf {
    root().join("tests/models").join(name)
}

fn golden() -> Value {
    let text = std::fs::read_to_string(root().join("tests/golden/finetune_data.json"))
        .expect("tests/golden/finetune_data.json (run tests/golden/finetune_data.py)");
    serde_json::from_str(&text).unwrap()
}

fn tokenizer(name: &str, max_length: usize) -> Tokenizer {
    let cfg = config(name);
    let mut tok = Tokenizer::from_dir(model(name), cfg.max_position_embeddings).unwrap();
    tok.set_max_length(max_length).unwrap();
    tok
}

fn config(name: &str) -> BertConfig {
    BertConfig::from_file(model(name).join("config.json")).unwrap()
}

fn from<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

/// A golden `(b, t)` table, flattened, with its shape.
fn table(v: &Value) -> (Vec<i64>, usize, usize) {
    let rows = v.as_array().unwrap();
    let t = rows[0].as_array().unwrap().len();
    let flat: Vec<i64> = rows.iter().flat_map(ints).collect();
    assert_eq!(flat.len(), rows.len() * t, "ragged golden rows");
    (flat, rows.len(), t)
}

fn widen(v: &[u32]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// The batch equals the golden's input_ids, token_type_ids and attention_mask, shape included.
fn assert_batch(batch: &Batch, case: &Value, what: &str) {
    for (key, ours) in [
        ("input_ids", &batch.input_ids),
        ("token_type_ids", &batch.token_type_ids),
        ("attention_mask", &batch.attention_mask),
    ] {
        let (want, b, t) = table(&case[key]);
        assert_eq!((batch.b, batch.t), (b, t), "{what}: batch shape");
        assert_eq!(ours.len(), b * t, "{what}: {key} length");
        assert_eq!(widen(ours), want, "{what}: {key}");
    }
}

fn message(e: Error) -> String {
    match e {
        Error::Input(m) => m,
        other => panic!("expected an input error, got {other:?}"),
    }
}

// ---------------------------------------------------------------- token classification

fn ner_examples(g: &Value) -> Vec<TokenExample> {
    from(&g["ner_examples"])
}

#[test]
fn token_classification_matches_run_ner() {
    let g = golden();
    let examples = ner_examples(&g);
    let cases = g["ner"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "a WordPiece and a byte-level BPE case");
    for case in cases {
        let name = case["model"].as_str().unwrap();
        let tok = tokenizer(name, case["max_length"].as_u64().unwrap() as usize);
        let labels = token_label_list(&examples, &config(name).label2id).unwrap();
        assert_eq!(labels, from::<Vec<String>>(&g["ner_config_labels"]), "{name}: the config's label order");
        let out = token_batch(&tok, &examples, &labels).unwrap();
        assert_eq!(out.batch.b, examples.len(), "{name}: one row per example");
        assert_batch(&out.batch, case, name);
        let (want, _, _) = table(&case["labels"]);
        assert_eq!(out.labels.len(), out.batch.b * out.batch.t, "{name}: one label per token");
        assert_eq!(out.labels, want, "{name}: labels");
        let cut: Vec<usize> = from(&case["truncated"]);
        assert!(cut.contains(&2), "{name}: the long example is cut");
        assert_eq!(out.truncated, cut, "{name}: the examples cut at max_length");
    }
}

#[test]
fn token_label_list_sorted_without_config_labels() {
    let g = golden();
    let examples = ner_examples(&g);
    let sorted: Vec<String> = from(&g["sorted_labels"]);
    assert_eq!(sorted.len(), 4);
    assert_eq!(token_label_list(&examples, &BTreeMap::new()).unwrap(), sorted);
    // transformers' defaults for a model never told its labels count as none.
    let defaults: BTreeMap<String, usize> = (0..2).map(|i| (format!("LABEL_{i}"), i)).collect();
    assert_eq!(token_label_list(&examples, &defaults).unwrap(), sorted);
    // The sorted labels as the label set give the same batch with other class ids.
    let tok = tokenizer("tiny-ner", 64);
    let out = token_batch(&tok, &examples[..1], &sorted).unwrap();
    let first: Vec<i64> = out.labels.iter().copied().filter(|&l| l != IGNORE).collect();
    // John lives in Washington: B-PER O O B-LOC in the sorted order B-LOC B-ORG B-PER O.
    assert_eq!(first, vec![2, 3, 3, 0]);
}

#[test]
fn token_classification_errors_name_the_example() {
    let tok = tokenizer("tiny-ner", 64);
    let labels: Vec<String> = ["O", "B-PER"].iter().map(|s| s.to_string()).collect();
    let ex = |tokens: &[&str], tags: &[&str]| TokenExample {
        tokens: tokens.iter().map(|s| s.to_string()).collect(),
        tags: tags.iter().map(|s| s.to_string()).collect(),
    };
    let good = ex(&["John", "runs"], &["B-PER", "O"]);
    let cases: Vec<(TokenExample, &str)> = vec![
        (ex(&["John", "runs"], &["B-PER"]), "2 tokens but 1 tags"),
        (ex(&[], &[]), "`tokens` is empty"),
        (ex(&["John", " "], &["B-PER", "O"]), "word 1 is empty or whitespace"),
        (ex(&["John", "runs"], &["B-PER", "B-LOC"]), "the tag `B-LOC` is not in the label set"),
    ];
    assert_eq!(cases.len(), 4);
    for (bad, want) in cases {
        let m = message(token_batch(&tok, &[good.clone(), bad.clone()], &labels).unwrap_err());
        assert!(m.contains("example 1") && m.contains(want), "{want}: {m}");
    }
    assert!(message(token_batch(&tok, &[], &labels).unwrap_err()).contains("no examples"));
    // A tag the checkpoint's labels lack.
    let m = message(token_label_list(&[good, ex(&["x"], &["B-FOO"])], &config("tiny-ner").label2id).unwrap_err());
    assert!(m.contains("example 1") && m.contains("`B-FOO`") && m.contains("label2id"), "{m}");
    // A label2id whose classes are not 0..n-1.
    let broken: BTreeMap<String, usize> = [("A".to_string(), 0), ("B".to_string(), 0)].into_iter().collect();
    assert!(matches!(token_label_list(&[ex(&["x"], &["A"])], &broken), Err(Error::Config(_))));
}

#[test]
fn encode_words_gives_word_ids_and_prefix_spaces() {
    let bert = tokenizer("tiny-ner", 64);
    let enc = bert.encode_words(&["John", "Washington"]).unwrap();
    assert_eq!(enc.tokens, ["[CLS]", "john", "was", "##h", "##ing", "##t", "##on", "[SEP]"]);
    assert_eq!(enc.word_ids, [None, Some(0), Some(1), Some(1), Some(1), Some(1), Some(1), None]);
    // WordPiece needs no prefix space: the same tokens.
    assert_eq!(bert.for_split_words().encode_words(&["John", "Washington"]).unwrap(), enc);
    let roberta = tokenizer("tiny-roberta-ner", 64);
    let plain = roberta.encode_words(&["John", "lives"]).unwrap();
    let spaced = roberta.for_split_words().encode_words(&["John", "lives"]).unwrap();
    assert_eq!(plain.tokens[1], "J");
    assert_eq!(spaced.tokens[1], "ĠJ");
    // The copy leaves the original alone, pairs included.
    assert_eq!(roberta.encode_words(&["John", "lives"]).unwrap(), plain);
    assert_eq!(
        roberta.for_split_words().encode("a b", Some("c")).unwrap().ids.len(),
        roberta.encode("a b", Some("c")).unwrap().ids.len()
    );
}

// ---------------------------------------------------------------- QA

fn qa_examples(g: &Value) -> Vec<QaExample> {
    from(&g["qa_examples"])
}

#[test]
fn qa_matches_run_qa() {
    let g = golden();
    let examples = qa_examples(&g);
    assert_eq!(examples.len(), 6);
    let cases = g["qa"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "BERT and RoBERTa framing");
    for case in cases {
        let name = case["model"].as_str().unwrap();
        let (max_length, stride) =
            (case["max_length"].as_u64().unwrap() as usize, case["doc_stride"].as_u64().unwrap() as usize);
        let tok = tokenizer(name, 64);
        let out = qa_batch(&tok, &examples, max_length, stride).unwrap();
        let example: Vec<usize> = from(&case["example"]);
        assert_eq!(out.example, example, "{name}: window → example");
        assert_batch(&out.batch, case, name);
        assert_eq!(widen(&out.start), ints(&case["start"]), "{name}: start");
        assert_eq!(widen(&out.end), ints(&case["end"]), "{name}: end");
        // The windows' offsets (used to map predictions back) are transformers' offset mapping.
        let offsets: Vec<Vec<(usize, usize)>> = from(&case["offsets"]);
        assert_eq!(out.windows.len(), offsets.len(), "{name}: windows");
        for (w, (ours, want)) in out.windows.iter().zip(&offsets).enumerate() {
            assert_eq!(&ours.offsets, want, "{name}: offsets of window {w}");
        }
        // What the golden covers: an example of 3+ windows, an answered example with CLS-labelled windows.
        let per_example: Vec<usize> =
            (0..examples.len()).map(|i| example.iter().filter(|&&e| e == i).count()).collect();
        assert!(per_example.iter().any(|&n| n >= 3), "{name}: {per_example:?}");
        let of_long: Vec<u32> = (0..out.start.len()).filter(|&w| example[w] == 1).map(|w| out.start[w]).collect();
        assert!(of_long.contains(&0), "{name}: a window without the answer");
        assert!(of_long.iter().any(|&s| s != 0), "{name}: the window with it");
    }
    // run_qa's start walk runs past the context when the answer starts in its last token; we stop there.
    let bert = &cases[0];
    let (ours, run_qa) = (ints(&bert["start"]), ints(&bert["start_run_qa"]));
    let differ: Vec<usize> = (0..ours.len()).filter(|&w| ours[w] != run_qa[w]).collect();
    assert_eq!(differ.len(), 1, "the edge case is in the golden once");
    let w = differ[0];
    let tok = tokenizer("tiny-qa", 64);
    let out = qa_batch(&tok, &examples, 32, 8).unwrap();
    assert_eq!(out.windows[w].tokens[out.start[w] as usize], "river");
    assert_eq!(out.windows[w].tokens[run_qa[w] as usize], "[SEP]");
}

#[test]
fn qa_defaults_are_run_qa_s_and_capped_by_the_tokenizer() {
    assert_eq!((QA_MAX_LENGTH, QA_DOC_STRIDE), (384, 128));
    let g = golden();
    let examples = qa_examples(&g);
    let tok = tokenizer("tiny-qa", 32);
    // 384 is capped to the tokenizer's 32: the same windows as asking for 32.
    let capped = qa_batch(&tok, &examples, QA_MAX_LENGTH, 8).unwrap();
    let exact = qa_batch(&tok, &examples, 32, 8).unwrap();
    assert_eq!(capped.batch.t, 32);
    assert_eq!(capped, exact);
}

fn squad(question: &str, context: &str, answers: &[(&str, usize)]) -> QaExample {
    QaExample {
        question: question.into(),
        context: context.into(),
        answers: QaAnswers {
            text: answers.iter().map(|a| a.0.to_string()).collect(),
            answer_start: answers.iter().map(|a| a.1).collect(),
        },
    }
}

#[test]
fn qa_errors_name_the_example() {
    let tok = tokenizer("tiny-qa", 64);
    let ctx = "Zoë the café owner lives in Zürich by the lake.";
    let good = squad("Where?", ctx, &[("Zürich", 28)]);
    assert_eq!(qa_batch(&tok, std::slice::from_ref(&good), 32, 8).unwrap().start.len(), 1);
    let byte_start = ctx.find("Zürich").unwrap();
    assert_ne!(byte_start, 28, "the context has multi-byte characters before the answer");
    let long_question = "why ".repeat(40);
    let cases: Vec<(QaExample, &str)> = vec![
        (squad("Where?", ctx, &[("Zürich", byte_start)]), "answer 0 `Zürich` is not at character 30"),
        (squad("Where?", ctx, &[("Zürich", 27)]), "is not at character 27"),
        (squad("Where?", ctx, &[("lake.", 42), ("lake.!", 42)]), "answer 1 `lake.!`"),
        (squad("Where?", ctx, &[("Zürich", 200)]), "is not at character 200"),
        (squad("Where?", ctx, &[("", 0)]), "answer 0 is empty"),
        (QaExample { answers: QaAnswers { text: vec!["x".into()], answer_start: vec![] }, ..good.clone() },
            "1 texts but 0 answer_start"),
        (squad("  ", ctx, &[]), "the question is empty"),
        (squad("Where?", " \n", &[]), "the context is empty"),
        (squad(&long_question, ctx, &[]), "the question is too long"),
    ];
    assert_eq!(cases.len(), 9);
    for (bad, want) in cases {
        let m = message(qa_batch(&tok, &[good.clone(), bad.clone()], 32, 8).unwrap_err());
        assert!(m.contains("example 1") && m.contains(want), "{want}: {m}");
    }
    assert!(message(qa_batch(&tok, &[], 32, 8).unwrap_err()).contains("no examples"));
    let m = message(qa_batch(&tok, std::slice::from_ref(&good), 4, 0).unwrap_err());
    assert!(m.contains("max_length of at least 5"), "{m}");
    let m = message(qa_batch(&tok, &[good], 32, 28).unwrap_err());
    assert!(m.contains("doc_stride of 28") && m.contains("below 28"), "{m}");
}

// ---------------------------------------------------------------- sequence classification

#[test]
fn sequence_classification_matches_run_glue_tokenization() {
    let g = golden();
    let case = &g["sequence"];
    let name = case["model"].as_str().unwrap();
    let tok = tokenizer(name, case["max_length"].as_u64().unwrap() as usize);
    let mut examples: Vec<TextExample> = from(&g["seq_examples"]);
    assert_eq!(examples.len(), 4);
    assert!(examples.iter().any(|e| e.text_pair.is_some()) && examples.iter().any(|e| e.text_pair.is_none()));

    // Every label in the config: its classes.
    let labels = sequence_label_list(&examples, &config(name).label2id).unwrap();
    assert_eq!(labels, from::<Vec<String>>(&case["config_label_list"]));
    let out = sequence_batch(&tok, &examples, &labels).unwrap();
    assert_batch(&out.batch, case, name);
    assert_eq!(widen(&out.labels), ints(&case["config_labels"]));
    let cut: Vec<usize> = from(&case["truncated"]);
    assert!(cut.contains(&2), "the long pair is cut");
    assert_eq!(out.truncated, cut);

    // A label the config lacks: order of first appearance.
    let relabel: Vec<String> = from(&g["seq_labels_appearance"]);
    assert_eq!(relabel.len(), examples.len());
    for (e, l) in examples.iter_mut().zip(relabel) {
        e.label = l;
    }
    let labels = sequence_label_list(&examples, &config(name).label2id).unwrap();
    assert_eq!(labels, from::<Vec<String>>(&case["appearance_label_list"]));
    let out = sequence_batch(&tok, &examples, &labels).unwrap();
    assert_batch(&out.batch, case, name);
    assert_eq!(widen(&out.labels), ints(&case["appearance_labels"]));
    // No config labels: first appearance too.
    assert_eq!(sequence_label_list(&examples, &BTreeMap::new()).unwrap(), labels);
}

#[test]
fn sequence_classification_errors_name_the_example() {
    let tok = tokenizer("tiny-classifier", 64);
    let labels: Vec<String> = vec!["a".into(), "b".into()];
    let ex = |text: &str, label: &str| TextExample { text: text.into(), text_pair: None, label: label.into() };
    let m = message(sequence_batch(&tok, &[ex("fine", "a"), ex(" ", "a")], &labels).unwrap_err());
    assert!(m.contains("example 1") && m.contains("the text is empty"), "{m}");
    let m = message(sequence_batch(&tok, &[ex("fine", "a"), ex("fine", "c")], &labels).unwrap_err());
    assert!(m.contains("example 1") && m.contains("the label `c` is not in the label set (a, b)"), "{m}");
    assert!(message(sequence_label_list(&[], &BTreeMap::new()).unwrap_err()).contains("no examples"));
}

// ---------------------------------------------------------------- reading examples

#[test]
fn parse_jsonl_reads_lines_or_an_array() {
    let text = "{\"id\": \"q1\", \"title\": \"T\", \"question\": \"Q?\", \"context\": \"C.\", \
                \"answers\": {\"text\": [\"C\"], \"answer_start\": [0]}}\n\n\
                {\"question\": \"R?\", \"context\": \"D.\", \"answers\": {\"text\": [], \"answer_start\": []}}\n";
    let qa: Vec<QaExample> = parse_jsonl(text).unwrap();
    assert_eq!(qa.len(), 2);
    assert_eq!(qa[0].answers.answer_start, vec![0]);
    assert!(qa[1].answers.text.is_empty());

    let seq: Vec<TextExample> = parse_jsonl("[{\"text\": \"a\", \"label\": \"x\"}, \
                                             {\"text\": \"b\", \"text_pair\": \"c\", \"label\": \"y\"}]").unwrap();
    assert_eq!(seq.len(), 2);
    assert_eq!(seq[1].text_pair.as_deref(), Some("c"));

    let text = "{\"tokens\": [\"a\"], \"tags\": [\"O\"]}\n\n{\"tokens\": [\"a\"]}";
    let m = message(parse_jsonl::<TokenExample>(text).unwrap_err());
    assert!(m.contains("line 3") && m.contains("tags"), "{m}");
}
