//! YAML: every document of every file, and the commands inside them.

use super::*;

// YAML

/// Every document of a YAML file, merge keys applied.
pub(crate) fn yaml_documents(path: &Path, errors: &mut Vec<String>) -> Vec<Value> {
    let text = read(path);
    let mut docs = Vec::new();
    for de in serde_norway::Deserializer::from_str(&text) {
        match <Value as serde::Deserialize>::deserialize(de) {
            Ok(mut v) => {
                if let Err(e) = v.apply_merge() {
                    errors.push(format!("{}: merge keys: {e}", path.display()));
                }
                if !v.is_null() {
                    docs.push(v);
                }
            }
            Err(e) => {
                errors.push(format!("{}: not YAML: {e}", path.display()));
                break;
            }
        }
    }
    docs
}

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A command given as a YAML sequence or string, as shell text; the
/// script of `[sh, -c, SCRIPT]` on lines of its own, as the shell reads it.
pub(crate) fn command_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Sequence(seq) => {
            let words: Vec<String> = seq
                .iter()
                .map(|w| match w {
                    Value::String(s) => s.clone(),
                    other => serde_norway::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_owned(),
                })
                .collect();
            Some(match words.iter().position(|w| w == "-c") {
                Some(at) => format!("{}\n{}", words[..=at].join(" "), words[at + 1..].join(" ")),
                None => words.join(" "),
            })
        }
        _ => None,
    }
}

#[test]
pub(crate) fn every_yaml_file_parses() {
    let mut errors = Vec::new();
    let mut count = 0;
    for dir in [COMPOSE, K8S] {
        for path in files(&repo().join(dir)).iter().filter(|p| is_yaml(p)) {
            count += 1;
            if yaml_documents(path, &mut errors).is_empty() {
                errors.push(format!("{}: no document", path.display()));
            }
        }
    }
    assert!(count >= 2, "no YAML under {COMPOSE} and {K8S}");
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
