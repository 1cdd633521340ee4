//! The tasks' own validation metrics, computed as their reference implementations compute them: entity-level F1
//! for token classification (seqeval's default: conlleval's chunking of IOB tags, micro-averaged over entities), and
//! SQuAD's exact match and F1 for extractive QA (the official v2.0 evaluation script's normalisation, the best
//! over the gold answers, averaged over examples); and pre-training's heads' losses and accuracies, per micro-batch
//! ([`PretrainEval`]) and per optimiser step ([`PretrainStep`]).

use std::collections::{HashMap, HashSet};

use crate::heads::qa;
use crate::tokenizer::Encoded;
use crate::Result;

/// The entities of one sentence's IOB tags (`B-PER`, `I-PER`, `O`; also IOBES' `E-`/`S-`): `(type, first, last)`
/// token indices, as seqeval's `get_entities` finds them (an `I-` after `O` or after another type starts one).
pub fn entities(tags: &[&str]) -> Vec<(String, usize, usize)> {
    let split = |t: &str| -> (char, String) {
        let tag = t.chars().next().unwrap_or('O');
        let ty = t.get(1..).unwrap_or("").split_once('-').map_or_else(|| t.get(1..).unwrap_or(""), |(_, b)| b);
        (tag, if ty.is_empty() { "_".to_string() } else { ty.to_string() })
    };
    let mut out = Vec::new();
    let (mut prev_tag, mut prev_type, mut begin) = ('O', String::new(), 0);
    for (i, t) in tags.iter().copied().chain(std::iter::once("O")).enumerate() {
        let (tag, ty) = split(t);
        let end = matches!(prev_tag, 'E' | 'S')
            || matches!((prev_tag, tag), ('B' | 'I', 'B' | 'S' | 'O'))
            || (prev_tag != 'O' && prev_tag != '.' && prev_type != ty);
        if end {
            out.push((prev_type.clone(), begin, i - 1));
        }
        let start = matches!(tag, 'B' | 'S')
            || matches!((prev_tag, tag), ('E' | 'S' | 'O', 'E' | 'I'))
            || (tag != 'O' && tag != '.' && prev_type != ty);
        if start {
            begin = i;
        }
        (prev_tag, prev_type) = (tag, ty);
    }
    out
}

/// seqeval's `f1_score` (micro average) of predicted against gold tag sequences, one pair per sentence: 0 when
/// there are no entities on either side.
pub fn entity_f1(gold: &[Vec<&str>], pred: &[Vec<&str>]) -> f32 {
    let set = |seqs: &[Vec<&str>]| -> HashSet<(usize, String, usize, usize)> {
        seqs.iter()
            .enumerate()
            .flat_map(|(s, tags)| entities(tags).into_iter().map(move |(ty, a, b)| (s, ty, a, b)))
            .collect()
    };
    let (g, p) = (set(gold), set(pred));
    let correct = g.intersection(&p).count() as f64;
    if correct == 0.0 {
        return 0.0;
    }
    let (precision, recall) = (correct / p.len() as f64, correct / g.len() as f64);
    (2.0 * precision * recall / (precision + recall)) as f32
}

/// SQuAD's `normalize_answer`: lower case, ASCII punctuation removed, the articles a/an/the removed where they are
/// whole words (the script's `\b(a|an|the)\b`: runs of word characters), whitespace collapsed.
pub fn normalize_answer(s: &str) -> String {
    let text: String = s.to_lowercase().chars().filter(|c| !c.is_ascii_punctuation()).collect();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let (mut out, mut word) = (String::with_capacity(text.len()), String::new());
    for c in text.chars().chain(std::iter::once(' ')) {
        if is_word(c) {
            word.push(c);
            continue;
        }
        out.push_str(if matches!(word.as_str(), "a" | "an" | "the") { " " } else { &word });
        word.clear();
        out.push(c);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// SQuAD's exact match and F1 of one prediction, the best over the gold answers, as the v2.0 evaluation script
/// computes them: no gold answer (an unanswerable question) counts as the one gold answer "", and where either side
/// normalises to no tokens F1 is 1 if both do, else 0.
pub fn squad_scores(prediction: &str, golds: &[String]) -> (f64, f64) {
    let empty = [String::new()];
    let golds = if golds.is_empty() { &empty[..] } else { golds };
    let p = normalize_answer(prediction);
    let p_tokens: Vec<&str> = p.split_whitespace().collect();
    let mut best = (0.0f64, 0.0f64);
    for g in golds {
        let g = normalize_answer(g);
        let g_tokens: Vec<&str> = g.split_whitespace().collect();
        let em = (p == g) as u8 as f64;
        let f1 = if p_tokens.is_empty() || g_tokens.is_empty() {
            (p_tokens == g_tokens) as u8 as f64
        } else {
            let mut counts: HashMap<&str, i64> = HashMap::new();
            for t in &g_tokens {
                *counts.entry(t).or_default() += 1;
            }
            let same: i64 = p_tokens
                .iter()
                .filter(|t| counts.get_mut(**t).is_some_and(|c| {
                    *c -= 1;
                    *c >= 0
                }))
                .count() as i64;
            if same == 0 {
                0.0
            } else {
                let (precision, recall) = (same as f64 / p_tokens.len() as f64, same as f64 / g_tokens.len() as f64);
                2.0 * precision * recall / (precision + recall)
            }
        };
        best = (best.0.max(em), best.1.max(f1));
    }
    best
}

/// What QA's metrics need besides the rows: each row's window (offsets into its example's context) and example,
/// and each example's context and gold answer texts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QaReference {
    pub windows: Vec<Encoded>,
    pub example: Vec<usize>,
    pub contexts: Vec<String>,
    pub answers: Vec<Vec<String>>,
}

impl QaReference {
    /// Mean exact match and F1 over the examples of `rows` (row indices), each example's answer decoded from all
    /// its windows' logits as the `answer` task does ([`qa::decode`]). `logits[i]`: row `rows[i]`'s `(len, 2)`
    /// start/end pairs, padding dropped. Every window of an example must be among `rows`.
    pub fn scores(&self, rows: &[usize], logits: &[Vec<f32>]) -> Result<(f32, f32)> {
        let mut by_example: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
        for (i, &r) in rows.iter().enumerate() {
            by_example.entry(self.example[r]).or_default().push(i);
        }
        let (mut em, mut f1) = (0.0, 0.0);
        for (ex, members) in &by_example {
            let windows: Vec<Encoded> = members.iter().map(|&i| self.windows[rows[i]].clone()).collect();
            let l: Vec<Vec<f32>> = members.iter().map(|&i| logits[i].clone()).collect();
            let answer = qa::decode(&self.contexts[*ex], &windows, &l)?;
            let (e, f) = squad_scores(&answer.answer, &self.answers[*ex]);
            em += e;
            f1 += f;
        }
        let n = by_example.len().max(1) as f64;
        Ok(((em / n) as f32, (f1 / n) as f32))
    }
}

/// What one batch's pre-training forward gives: the loss of each head and how many predictions were right.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PretrainEval {
    pub mlm_loss: f32,
    pub mlm_correct: usize,
    pub mlm_count: usize,
    pub nsp_loss: Option<f32>,
    pub nsp_correct: usize,
    /// The rows with a next-sentence label (0 without NSP).
    pub nsp_count: usize,
}

impl PretrainEval {
    /// `L_mlm + L_nsp`.
    pub fn loss(&self) -> f32 {
        self.mlm_loss + self.nsp_loss.unwrap_or(0.0)
    }
}

/// Pre-training's part of an optimiser step's report, over its micro-batches: each head's loss as the step's loss
/// is taken (the micro-batches' mean, so that `loss = mlm_loss + nsp_loss` up to rounding), each head's accuracy as
/// its right predictions over all of the step's (the selected tokens for the masked LM, the rows for NSP).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PretrainStep {
    pub mlm_loss: f32,
    pub mlm_accuracy: f32,
    /// `None` without next-sentence prediction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsp_loss: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsp_accuracy: Option<f32>,
}

impl PretrainStep {
    /// The step's metrics from its micro-batches' evaluations; `None` for none.
    pub fn of(evals: &[PretrainEval]) -> Option<PretrainStep> {
        if evals.is_empty() {
            return None;
        }
        let mean = |x: &mut dyn Iterator<Item = f32>| {
            let (sum, n) = x.fold((0f64, 0usize), |(s, n), v| (s + v as f64, n + 1));
            (n > 0).then(|| (sum / n as f64) as f32)
        };
        let ratio = |right: usize, count: usize| right as f32 / count.max(1) as f32;
        let sum = |f: fn(&PretrainEval) -> usize| evals.iter().map(f).sum::<usize>();
        let nsp_count = sum(|e| e.nsp_count);
        Some(PretrainStep {
            mlm_loss: mean(&mut evals.iter().map(|e| e.mlm_loss))?,
            mlm_accuracy: ratio(sum(|e| e.mlm_correct), sum(|e| e.mlm_count)),
            nsp_loss: mean(&mut evals.iter().filter_map(|e| e.nsp_loss)),
            nsp_accuracy: (nsp_count > 0).then(|| ratio(sum(|e| e.nsp_correct), nsp_count)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(mlm_loss: f32, mlm: (usize, usize), nsp: Option<(f32, usize, usize)>) -> PretrainEval {
        PretrainEval { mlm_loss, mlm_correct: mlm.0, mlm_count: mlm.1, nsp_loss: nsp.map(|n| n.0),
            nsp_correct: nsp.map_or(0, |n| n.1), nsp_count: nsp.map_or(0, |n| n.2) }
    }

    #[test]
    fn a_steps_metrics_sum_its_micro_batches() {
        // Losses: the micro-batches' mean, as the step's loss; accuracies: right over all predictions, so a
        // micro-batch of 1 selected token does not weigh as much as one of 9.
        let s = PretrainStep::of(&[eval(2.0, (1, 1), Some((0.5, 3, 4))), eval(4.0, (0, 9), Some((0.7, 1, 2)))]).unwrap();
        assert_eq!(s, PretrainStep { mlm_loss: 3.0, mlm_accuracy: 0.1, nsp_loss: Some(0.6), nsp_accuracy: Some(4.0 / 6.0) });
        let s = PretrainStep::of(&[eval(2.0, (3, 4), None)]).unwrap();
        assert_eq!((s.mlm_accuracy, s.nsp_loss, s.nsp_accuracy), (0.75, None, None));
        assert_eq!(PretrainStep::of(&[]), None);
    }

    #[test]
    fn entities_are_chunked_as_seqeval_chunks_them() {
        // seqeval.metrics.sequence_labeling.get_entities on the same tags (checked by hand against its source).
        let tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "O", "B-MISC"];
        assert_eq!(
            entities(&tags),
            vec![
                ("PER".into(), 0, 1),
                ("LOC".into(), 3, 4),
                ("LOC".into(), 5, 5),
                ("ORG".into(), 6, 6),
                ("MISC".into(), 8, 8)
            ]
        );
        assert!(entities(&["O", "O"]).is_empty());
    }

    #[test]
    fn entity_f1_is_micro_over_entities() {
        let gold = vec![vec!["B-PER", "I-PER", "O", "B-LOC"], vec!["B-ORG", "O"]];
        let pred = vec![vec!["B-PER", "I-PER", "O", "O"], vec!["B-ORG", "B-LOC"]];
        // gold 3 entities, predicted 3, 2 right: P = R = 2/3.
        assert!((entity_f1(&gold, &pred) - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(entity_f1(&gold, &[vec!["O"; 4], vec!["O"; 2]]), 0.0);
    }

    #[test]
    fn squad_scores_normalise_as_the_official_script() {
        assert_eq!(normalize_answer("The  Eiffel Tower!"), "eiffel tower");
        let golds = vec!["Denver Broncos".to_string(), "the Broncos".to_string()];
        assert_eq!(squad_scores("Broncos", &golds).0, 1.0);
        let (em, f1) = squad_scores("the Denver team", &golds);
        assert_eq!(em, 0.0);
        // "denver team" vs "denver broncos": one token in common, P = R = 1/2.
        assert!((f1 - 0.5).abs() < 1e-12);
        assert_eq!(squad_scores("", &[]), (1.0, 1.0));
        assert_eq!(squad_scores("something", &[]), (0.0, 0.0));
    }

    /// tests/golden/metrics.py: seqeval's f1_score and the SQuAD v2.0 script's functions on seeded cases.
    fn refs(v: &[Vec<String>]) -> Vec<Vec<&str>> {
        v.iter().map(|s| s.iter().map(String::as_str).collect()).collect()
    }

    #[test]
    fn metrics_match_seqeval_and_the_squad_script() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/metrics.json");
        let golden: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let strings = |v: &serde_json::Value| -> Vec<Vec<String>> {
            v.as_array().unwrap().iter().map(|s| s.as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()).collect()
        };
        let cases = golden["entity_f1"].as_array().unwrap();
        assert_eq!(cases.len(), 40);
        for (i, c) in cases.iter().enumerate() {
            let (g, p) = (strings(&c["gold"]), strings(&c["pred"]));
            let want = c["f1"].as_f64().unwrap();
            // f32 of a ratio of small counts: within f32 rounding.
            assert!((entity_f1(&refs(&g), &refs(&p)) as f64 - want).abs() < 1e-6, "case {i}: want {want}");
        }
        let cases = golden["squad"].as_array().unwrap();
        assert_eq!(cases.len(), 40);
        for (i, c) in cases.iter().enumerate() {
            let golds: Vec<String> = c["golds"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
            let (em, f1) = squad_scores(c["prediction"].as_str().unwrap(), &golds);
            assert_eq!(em, c["exact_match"].as_f64().unwrap(), "case {i}");
            assert!((f1 - c["f1"].as_f64().unwrap()).abs() < 1e-12, "case {i}: {f1} vs {}", c["f1"]);
        }
    }
}
