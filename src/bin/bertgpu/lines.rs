//! The JSON-lines loop every command runs: stdin read line by line (plain text or a JSON object, see main.rs's
//! module doc), lines batched for the model, exactly one JSON value written per input line, in order.

use std::io::{self, BufRead, Write};

use serde_json::{json, Value};

use crate::Fail;

/// Which JSON object a command reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `{"text", "text_pair"?}` or a plain-text line
    Text,
    /// `{"question", "context"}`
    Qa,
    /// `{"query", "documents": [...]}`
    Rerank,
    /// `{"text", "labels": [...]?}` or a plain-text line (the labels then come from the command's options)
    ZeroShot,
}

/// One input line, parsed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Input {
    Text { text: String, pair: Option<String> },
    Qa { question: String, context: String },
    Rerank { query: String, documents: Vec<String> },
    ZeroShot { text: String, labels: Option<Vec<String>> },
}

impl Input {
    /// The text and optional pair of a text input (a qa input reads as question + context).
    pub(crate) fn text_and_pair(&self) -> (&str, Option<&str>) {
        match self {
            Input::Text { text, pair } => (text, pair.as_deref()),
            Input::Qa { question, context } => (question, Some(context)),
            Input::Rerank { query, .. } | Input::ZeroShot { text: query, .. } => (query, None),
        }
    }
}

fn parse_line(line: &str, shape: Shape) -> Result<Input, String> {
    let trimmed = line.trim();
    if !trimmed.starts_with('{') {
        if trimmed.is_empty() {
            return Err("empty line: nothing to process (send {\"text\": \"\"} to process an empty text)".into());
        }
        return match shape {
            Shape::Text => Ok(Input::Text { text: line.to_owned(), pair: None }),
            Shape::ZeroShot => Ok(Input::ZeroShot { text: line.to_owned(), labels: None }),
            Shape::Qa | Shape::Rerank => Err(format!("expected a JSON object {}", shape_hint(shape))),
        };
    }
    let v: Value = serde_json::from_str(trimmed).map_err(|e| {
        // JavaScript strings may hold lone UTF-16 surrogates, which `JSON.stringify` writes as `\udXXX` escapes.
        let hint = if e.to_string().contains("escape") && trimmed.to_ascii_lowercase().contains("\\ud") {
            " (a \\uD800-\\uDFFF escape must be half of a surrogate pair; replace lone surrogates, e.g. with \\uFFFD)"
        } else {
            ""
        };
        format!("invalid JSON ({e}){hint}; send one JSON object per line, or plain text not starting with '{{'")
    })?;
    let Value::Object(obj) = v else {
        return Err("expected a JSON object".into()); // unreachable for input starting with '{', kept for safety
    };
    let string = |key: &str, required: bool| -> Result<Option<String>, String> {
        match obj.get(key) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            None | Some(Value::Null) if !required => Ok(None),
            None | Some(Value::Null) => Err(format!("missing \"{key}\": expected {}", shape_hint(shape))),
            Some(other) => Err(format!("\"{key}\" must be a string, found {}", json_kind(other))),
        }
    };
    match shape {
        Shape::Text => Ok(Input::Text {
            text: string("text", true)?.unwrap_or_default(),
            pair: string("text_pair", false)?,
        }),
        Shape::Qa => Ok(Input::Qa {
            question: string("question", true)?.unwrap_or_default(),
            context: string("context", true)?.unwrap_or_default(),
        }),
        Shape::Rerank => {
            let Some(documents) = strings(&obj, "documents")? else {
                return Err(format!("missing \"documents\": expected {}", shape_hint(shape)));
            };
            Ok(Input::Rerank { query: string("query", true)?.unwrap_or_default(), documents })
        }
        Shape::ZeroShot => {
            Ok(Input::ZeroShot { text: string("text", true)?.unwrap_or_default(), labels: strings(&obj, "labels")? })
        }
    }
}

/// The array of strings at `key`, `None` where it is absent or null.
fn strings(obj: &serde_json::Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, String> {
    match obj.get(key) {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("\"{key}\"[{i}] must be a string, found {}", json_kind(other))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        None | Some(Value::Null) => Ok(None),
        Some(other) => Err(format!("\"{key}\" must be an array of strings, found {}", json_kind(other))),
    }
}

pub(crate) fn shape_hint(shape: Shape) -> &'static str {
    match shape {
        Shape::Text => "{\"text\": ..., \"text_pair\": ... (optional)}",
        Shape::Qa => "{\"question\": ..., \"context\": ...}",
        Shape::Rerank => "{\"query\": ..., \"documents\": [...]}",
        Shape::ZeroShot => "{\"text\": ..., \"labels\": [...]} (or plain text with --labels)",
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The read buffer of [`run_lines`].
const STDIN_BUFFER: usize = 1 << 16;

/// Reads stdin line by line, hands up to `batch_size` parsed inputs at a time to `process` (which returns one
/// result per input), and writes exactly one JSON line per input line, in order, flushing after each batch.
/// A batch also goes as soon as no further input has arrived: a program that writes one line and waits for its
/// answer gets it at once (it waited until `batch_size` lines or the end of input came), while a fast producer's
/// lines pile up in the pipe during each batch and make the next one full.
/// When `process` fails for a whole batch it is called again on each input alone, so one bad input does not take
/// its neighbours down with it (tasks may signal that by returning a single error for the batch).
pub(crate) fn run_lines<F>(shape: Shape, batch_size: usize, mut process: F) -> Result<(), Fail>
where
    F: FnMut(&[Input]) -> Vec<Result<Value, String>>,
{
    let stdin = io::stdin();
    // Our own buffer, to see whether input is waiting (`buffer()`); 64 KiB, so that a file or a fast pipe still
    // gives whole batches (a batch is cut short only where a read ends).
    let mut reader = io::BufReader::with_capacity(STDIN_BUFFER, stdin.lock());
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    // Each pending line: its parse result; parsed inputs are batched.
    let mut pending: Vec<Result<Input, String>> = Vec::new();
    let mut n_ok = 0usize;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n > 0 {
            let mut line = &buf[..];
            if let Some(l) = line.strip_suffix(b"\n") {
                line = l;
            }
            if let Some(l) = line.strip_suffix(b"\r") {
                line = l;
            }
            let parsed = match std::str::from_utf8(line) {
                Ok(s) => parse_line(s, shape),
                Err(_) => Err("the line is not valid UTF-8 text".into()),
            };
            n_ok += parsed.is_ok() as usize;
            pending.push(parsed);
        }
        // Nothing more buffered: the next read would wait for the writer, so what came so far goes now.
        let waiting = n == 0 || reader.buffer().is_empty();
        if (waiting && !pending.is_empty()) || n_ok >= batch_size {
            flush_batch(&mut pending, &mut process, &mut out)?;
            n_ok = 0;
        }
        if n == 0 {
            break;
        }
    }
    out.flush()?;
    Ok(())
}

fn flush_batch<F, W>(pending: &mut Vec<Result<Input, String>>, process: &mut F, out: &mut W) -> Result<(), Fail>
where
    F: FnMut(&[Input]) -> Vec<Result<Value, String>>,
    W: Write,
{
    let inputs: Vec<Input> = pending.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let mut results = if inputs.is_empty() { Vec::new() } else { process(&inputs) };
    if results.len() != inputs.len() {
        // A batch-level failure (one error for all): retry one by one to attach errors to the right lines.
        results = inputs
            .iter()
            .map(|i| process(std::slice::from_ref(i)).into_iter().next().unwrap_or_else(|| Err("no result".into())))
            .collect();
    }
    let mut results = results.into_iter();
    for p in pending.drain(..) {
        let value = match p {
            Err(msg) => json!({ "error": msg }),
            Ok(_) => match results.next() {
                Some(Ok(v)) => v,
                Some(Err(msg)) => json!({ "error": msg }),
                None => json!({ "error": "no result" }),
            },
        };
        serde_json::to_writer(&mut *out, &value).map_err(io::Error::from)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_json_lines() {
        let t = |s: &str| Input::Text { text: s.into(), pair: None };
        assert_eq!(parse_line("hello world", Shape::Text), Ok(t("hello world")));
        assert_eq!(parse_line("  leading space kept", Shape::Text), Ok(t("  leading space kept")));
        assert_eq!(parse_line("\"a json string\"", Shape::Text), Ok(t("\"a json string\"")));
        assert_eq!(parse_line("[1, 2]", Shape::Text), Ok(t("[1, 2]")));
        assert_eq!(
            parse_line(r#"{"text": "a", "text_pair": "b", "label": 3}"#, Shape::Text),
            Ok(Input::Text { text: "a".into(), pair: Some("b".into()) })
        );
        assert_eq!(parse_line(r#"{"text": "", "text_pair": null}"#, Shape::Text), Ok(t("")));
        assert_eq!(
            parse_line(r#"{"question": "q", "context": "c"}"#, Shape::Qa),
            Ok(Input::Qa { question: "q".into(), context: "c".into() })
        );
    }

    #[test]
    fn bad_lines() {
        let err = |s: &str, shape| parse_line(s, shape).unwrap_err();
        assert!(err("", Shape::Text).contains("empty line"));
        assert!(err(" \t ", Shape::Text).contains("empty line"));
        assert!(err("{\"text\": ", Shape::Text).contains("invalid JSON"));
        assert!(err("{\"txt\": \"a\"}", Shape::Text).contains("missing \"text\""));
        assert!(err("{\"text\": 5}", Shape::Text).contains("must be a string, found a number"));
        assert!(err("{\"text\": \"a\", \"text_pair\": [1]}", Shape::Text).contains("\"text_pair\" must be a string"));
        assert!(err("plain", Shape::Qa).contains("question"));
        assert!(err("{\"question\": \"q\"}", Shape::Qa).contains("missing \"context\""));
        assert!(err("{\"text\": \"a\", \"labels\": \"x,y\"}", Shape::ZeroShot).contains("array of strings"));
        assert!(err("{\"text\": \"a\", \"labels\": [\"x\", 1]}", Shape::ZeroShot).contains("\"labels\"[1]"));
        assert!(err("{\"documents\": []}", Shape::Rerank).contains("missing \"query\""));
    }

    #[test]
    fn zero_shot_lines() {
        let z = |t: &str, l: Option<&[&str]>| Input::ZeroShot {
            text: t.into(),
            labels: l.map(|l| l.iter().map(|s| s.to_string()).collect()),
        };
        assert_eq!(parse_line("plain text", Shape::ZeroShot), Ok(z("plain text", None)));
        assert_eq!(parse_line(r#"{"text": "a", "labels": ["x", "y"]}"#, Shape::ZeroShot), Ok(z("a", Some(&["x", "y"]))));
        assert_eq!(parse_line(r#"{"text": "a", "labels": null}"#, Shape::ZeroShot), Ok(z("a", None)));
    }
}
