//! Zero-shot classification through an NLI checkpoint, as transformers' `ZeroShotClassificationPipeline`
//! (transformers/pipelines/zero_shot_classification.py) computes it:
//!
//! - each (text, label) becomes the NLI pair (premise = the text, hypothesis = `template.format(label)`), tokenized
//!   with `truncation="only_first"` (the text gives up tokens, never the hypothesis) to the model's limit;
//! - every pair goes through the checkpoint's sequence classifier (the same logits as `classify`, in batches);
//! - the entailment index `e` is the first label of `id2label` whose name starts with "entail" (case-insensitive);
//!   the contradiction index is `c = 0`, or the last label where `e = 0` (the pipeline's
//!   `contradiction_id = -1 if entailment_id == 0 else 0`);
//! - single-label: `score_l = softmax over labels of logit[l][e]`; multi-label (and, as in the pipeline, any call with
//!   one label): `score_l = softmax(logit[l][c], logit[l][e])[1] = 1 / (1 + exp(logit[l][c] − logit[l][e]))`;
//! - labels best first.
//!
//! Where the pipeline only warns (no entailment label: it then reads index −1), or fails deep inside Python (a
//! template with `{name}`), we refuse with the reason.

use super::Model;
use crate::backend::Backend;
use crate::heads::classifier::{check_pair_allowed, rank_labels, LabelScore};
use crate::tokenizer::Encoded;
use crate::{Error, Result};

/// Pairs per forward pass: bounds a call's activation memory whatever its texts × labels (`embed`'s default batch
/// is 32 texts; pairs are sorted by length first, so a pass pads little).
pub const PAIRS_PER_PASS: usize = 64;

/// The pipeline's default `hypothesis_template`.
pub const DEFAULT_TEMPLATE: &str = "This example is {}.";

/// How [`Model::zero_shot`] poses and scores the labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZeroShotOptions {
    /// The hypothesis, with `{}` where the label goes (Python's `str.format`: `{0}` too, `{{` and `}}` for braces).
    pub template: String,
    /// Each label scored on its own (entailment against contradiction) instead of one softmax over the labels.
    pub multi_label: bool,
}

impl Default for ZeroShotOptions {
    fn default() -> Self {
        ZeroShotOptions { template: DEFAULT_TEMPLATE.to_string(), multi_label: false }
    }
}

/// The classifier's indices the pipeline reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NliLabels {
    pub entailment: usize,
    pub contradiction: usize,
}

/// The entailment and contradiction indices of a classifier's labels (`id2label` in id order), or the refusal
/// naming the labels it has.
pub fn nli_labels(labels: &[String]) -> Result<NliLabels> {
    let Some(entailment) = labels.iter().position(|l| l.to_lowercase().starts_with("entail")) else {
        return Err(Error::Input(format!(
            "zero-shot classification needs an NLI checkpoint, whose id2label has an entailment label (a name \
             starting with \"entail\"); this classifier's labels are {}",
            labels.join(", ")
        )));
    };
    if labels.len() < 2 {
        return Err(Error::Input(format!(
            "zero-shot classification needs an NLI classifier with at least two labels (entailment and \
             contradiction); this one has only `{}`",
            labels[0]
        )));
    }
    let contradiction = if entailment == 0 { labels.len() - 1 } else { 0 };
    Ok(NliLabels { entailment, contradiction })
}

/// `template.format(label)` for the templates Python formats with one argument: `{}` once, or `{0}` any number of
/// times, `{{` and `}}` for literal braces. Anything else (no placeholder, `{name}`, `{:>8}`, a lone brace) is refused.
pub fn hypothesis(template: &str, label: &str) -> Result<String> {
    let bad = |why: &str| {
        Error::Input(format!(
            "zero-shot template {template:?}: {why}; write `{{}}` where the label goes, e.g. {DEFAULT_TEMPLATE:?}"
        ))
    };
    let (mut out, mut auto, mut manual) = (String::with_capacity(template.len() + label.len()), 0, 0);
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let mut field = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => field.push(c),
                        None => return Err(bad("a `{` without its `}` (write `{{` for a brace)")),
                    }
                }
                match field.as_str() {
                    "" => auto += 1,
                    "0" => manual += 1,
                    _ => return Err(bad(&format!("the field `{{{field}}}` is not supported"))),
                }
                out.push_str(label);
            }
            '}' => return Err(bad("a single `}` (write `}}` for a brace)")),
            c => out.push(c),
        }
    }
    match (auto, manual) {
        (0, 0) => Err(bad("it has no `{}`, so every label would give the same hypothesis")),
        (a, m) if a > 0 && m > 0 => Err(bad("it mixes `{}` and `{0}`")),
        (a, _) if a > 1 => Err(bad("it has more than one `{}` (use `{0}` to repeat the label)")),
        _ => Ok(out),
    }
}

/// Candidate labels: at least one, none empty.
pub fn check_labels<S: AsRef<str>>(labels: &[S]) -> Result<()> {
    if labels.is_empty() {
        return Err(Error::Input("zero-shot classification needs at least one candidate label".into()));
    }
    if let Some(i) = labels.iter().position(|l| l.as_ref().trim().is_empty()) {
        return Err(Error::Input(format!("candidate label {i} is empty; every label must name a class")));
    }
    Ok(())
}

/// The scores of one text's labels from their pairs' logits (`logits[l]`: the classifier's outputs for label `l`),
/// in the labels' order; computed in f64 (the pipeline's numpy softmax, without its overflow on large logits).
pub fn scores(logits: &[Vec<f32>], nli: NliLabels, multi_label: bool) -> Vec<f32> {
    let (e, c) = (nli.entailment, nli.contradiction);
    if multi_label || logits.len() == 1 {
        return logits.iter().map(|l| (1.0 / (1.0 + (f64::from(l[c]) - f64::from(l[e])).exp())) as f32).collect();
    }
    let max = logits.iter().map(|l| f64::from(l[e])).fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits.iter().map(|l| (f64::from(l[e]) - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|x| (x / sum) as f32).collect()
}

impl<B: Backend> Model<B> {
    /// The entailment and contradiction indices of the checkpoint's sequence classifier, or why it cannot run
    /// zero-shot classification.
    pub fn nli_labels(&self) -> Result<NliLabels> {
        if super::pipelines::names_architecture(&self.config.architectures, "BertForTokenClassification") {
            return Err(Error::Input(
                "zero-shot classification needs an NLI sequence classifier; this is a token-classification \
                 checkpoint (architectures: BertForTokenClassification)"
                    .into(),
            ));
        }
        let head = self.heads.sequence_classifier().map_err(|e| {
            Error::Input(format!("zero-shot classification needs an NLI sequence classifier: {e}"))
        })?;
        nli_labels(&head.labels)
    }

    /// The pair (text, hypothesis) truncated as `tokenizer(text, hypothesis, truncation="only_first")`: the text
    /// keeps its first tokens, the hypothesis is never cut (a hypothesis that leaves the text no room is refused).
    pub fn encode_only_first(&self, text: &str, hypothesis: &str) -> Result<Encoded> {
        let whole = self.tokenizer.encode(text, Some(hypothesis))?;
        if !whole.truncated {
            return Ok(whole);
        }
        // The tokenizer cut the pair longest-first; cut it again, the text alone. Each side is tokenized without
        // special tokens (the inner tokenizer cuts a single text at max_length, more than the text may keep here).
        let inner = self.tokenizer.inner();
        let err = |e: tokenizers::Error| Error::Input(format!("cannot tokenize the input: {e}"));
        let mut a = inner.encode_char_offsets(text, false).map_err(err)?;
        let b = inner.encode_char_offsets(hypothesis, false).map_err(err)?;
        let added = inner.get_post_processor().map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, true));
        let max = self.tokenizer.max_length();
        let room = max.checked_sub(added + b.len()).filter(|&r| r > 0 && b.get_overflowing().is_empty());
        let Some(room) = room else {
            return Err(Error::Input(format!(
                "the hypothesis {hypothesis:?} is {}{} tokens, which leaves the text no room in the model's \
                 {max}-token limit ({added} special tokens); use a shorter template or label",
                if b.get_overflowing().is_empty() { "" } else { "over " },
                b.len()
            )));
        };
        a.truncate(room, 0, tokenizers::TruncationDirection::Right);
        let pair = inner.post_process(a, Some(b), true).map_err(err)?;
        let mut out = crate::tokenizer::encoded(&pair);
        out.truncated = true;
        Ok(out)
    }

    /// Zero-shot classification (see the module doc): per text, every label with its score, best first. The
    /// pairs of all texts run together, [`PAIRS_PER_PASS`] of similar lengths a pass.
    pub async fn zero_shot<S: AsRef<str>>(&self, texts: &[&str], labels: &[S], opts: &ZeroShotOptions)
        -> Result<Vec<Vec<LabelScore>>> {
        check_labels(labels)?;
        let labels: Vec<String> = labels.iter().map(|l| l.as_ref().to_string()).collect();
        let hypotheses = labels.iter().map(|l| hypothesis(&opts.template, l)).collect::<Result<Vec<_>>>()?;
        let nli = self.nli_labels()?;
        check_pair_allowed(&self.config, true, "zero-shot")?;
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut encoded = Vec::with_capacity(texts.len() * labels.len());
        for text in texts {
            for h in &hypotheses {
                encoded.push(self.encode_only_first(text, h)?);
            }
        }
        // Sorted by length so that each forward pass pads little; the logits go back to the pairs' order.
        let mut order: Vec<usize> = (0..encoded.len()).collect();
        order.sort_by_key(|&i| encoded[i].len());
        let sorted: Vec<Encoded> = order.iter().map(|&i| std::mem::take(&mut encoded[i])).collect();
        let mut logits_sorted = Vec::with_capacity(sorted.len());
        for chunk in sorted.chunks(PAIRS_PER_PASS) {
            logits_sorted.extend(self.classify_logits(chunk).await?);
        }
        let mut logits = vec![Vec::new(); logits_sorted.len()];
        for (l, &i) in logits_sorted.into_iter().zip(&order) {
            logits[i] = l;
        }
        let ranked = logits.chunks(labels.len()).map(|l| rank_labels(&labels, scores(l, nli, opts.multi_label), None));
        Ok(ranked.collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nli_indices_as_the_pipeline_picks_them() {
        let n = nli_labels(&names(&["contradiction", "neutral", "entailment"])).unwrap();
        assert_eq!(n, NliLabels { entailment: 2, contradiction: 0 });
        // Entailment first: the pipeline's contradiction is index -1, the last.
        let n = nli_labels(&names(&["ENTAILMENT", "NEUTRAL", "CONTRADICTION"])).unwrap();
        assert_eq!(n, NliLabels { entailment: 0, contradiction: 2 });
        let n = nli_labels(&names(&["not_entailment", "Entailed"])).unwrap();
        assert_eq!(n, NliLabels { entailment: 1, contradiction: 0 });
        let e = nli_labels(&names(&["negative", "neutral", "positive"])).unwrap_err().to_string();
        assert!(e.contains("negative, neutral, positive"), "{e}");
        assert!(nli_labels(&names(&["entailment"])).unwrap_err().to_string().contains("two labels"));
    }

    #[test]
    fn templates_format_as_python() {
        assert_eq!(hypothesis(DEFAULT_TEMPLATE, "sports").unwrap(), "This example is sports.");
        assert_eq!(hypothesis("{0} or not {0}?", "x").unwrap(), "x or not x?");
        assert_eq!(hypothesis("{{literal}} {}", "x").unwrap(), "{literal} x");
        for bad in ["no placeholder", "{{}}", "{label}", "{:>5}", "{} and {}", "{} {0}", "a } b", "{"] {
            let e = hypothesis(bad, "x").unwrap_err().to_string();
            assert!(e.contains("template") && e.contains("{}"), "{bad}: {e}");
        }
    }

    #[test]
    fn labels_are_checked() {
        assert!(check_labels::<&str>(&[]).unwrap_err().to_string().contains("at least one"));
        assert!(check_labels(&["a", " "]).unwrap_err().to_string().contains("label 1 is empty"));
        check_labels(&["a"]).unwrap();
    }

    #[test]
    fn scores_single_and_multi_label() {
        let nli = NliLabels { entailment: 2, contradiction: 0 };
        let logits = vec![vec![0.0, 5.0, 1.0], vec![1.0, -3.0, 3.0]];
        let single = scores(&logits, nli, false);
        let want0 = 1.0f64.exp() / (1.0f64.exp() + 3.0f64.exp());
        assert!((f64::from(single[0]) - want0).abs() < 1e-7 && (single[0] + single[1] - 1.0).abs() < 1e-6);
        let multi = scores(&logits, nli, true);
        assert!((f64::from(multi[0]) - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-7);
        assert!((f64::from(multi[1]) - 1.0 / (1.0 + (-2.0f64).exp())).abs() < 1e-7);
        // One label: the multi-label formula even when multi_label is off (the pipeline's `len == 1` branch).
        assert_eq!(scores(&logits[..1], nli, false), multi[..1]);
    }
}
