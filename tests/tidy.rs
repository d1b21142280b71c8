//! The architecture's rules, as a test (rust-analyzer's `tidy.rs` is the
//! model): what ARCHITECTURE.md says about the shape of the code is read
//! from it and checked against `cargo metadata` and the sources, so the
//! document and the code cannot drift apart unnoticed.
//!
//! Fails on:
//! - a crate dependency that does not point down the layers
//!   ARCHITECTURE.md lists (between `<!-- tidy:layers -->` markers);
//! - `unsafe` outside the files it lists (`<!-- tidy:unsafe -->`);
//! - a library crate without `#![forbid(unsafe_code)]` (fabric excepted)
//!   or `#![warn(missing_docs)]`;
//! - `anyhow` in a library crate;
//! - a Rust file without a `//!` doc;
//! - a source file over [`FILE_LINES_MAX`] lines.
//!
//! Prints the longest functions as a report, never as a failure. Each rule
//! is a function of its inputs, so that the unit tests at the bottom can
//! break it on purpose.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longer files hold more than one idea; split them.
const FILE_LINES_MAX: usize = 900;

/// The one crate allowed `unsafe`: memory access and rdma verbs.
const UNSAFE_CRATE: &str = "fabric";

/// How many functions the report lists.
const REPORT_FUNCTIONS: usize = 10;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable")
}

/// The lines between `<!-- tidy:NAME -->` and `<!-- /tidy:NAME -->`.
fn section<'a>(doc: &'a str, name: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<!-- tidy:{name} -->"), format!("<!-- /tidy:{name} -->"));
    let start = doc
        .find(&open)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no {open} section"));
    let body = &doc[start + open.len()..];
    let end = body
        .find(&close)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md's {open} section is not closed by {close}"));
    body[..end].lines().filter(|l| !l.trim().is_empty()).collect()
}

/// The names in backquotes on a line.
fn quoted(line: &str) -> Vec<String> {
    line.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Layer of each crate (by directory name; the root package is `kintsugi`):
/// the section's lines are `- N: `a`, `b``.
fn layers(doc: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in section(doc, "layers") {
        let rest = line.trim().trim_start_matches('-').trim();
        let (n, names) = rest
            .split_once(':')
            .unwrap_or_else(|| panic!("a layer line reads `- N: `crate`, ...`, not {line:?}"));
        let n: u32 = n
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("not a layer number: {line:?}"));
        for name in quoted(names) {
            assert!(out.insert(name.clone(), n).is_none(), "{name} is in two layers");
        }
    }
    out
}

/// A workspace package, as `cargo metadata` describes it.
#[derive(Debug)]
struct Package {
    /// Its directory's name (`kintsugi` for the root package).
    name: String,
    dir: PathBuf,
    /// Its lib target's root file, if it has one.
    lib: Option<PathBuf>,
    /// Workspace packages it depends on (normal and build dependencies).
    deps: BTreeSet<String>,
    /// Every dependency's name, workspace or not (normal only).
    all_deps: BTreeSet<String>,
}

fn packages() -> Vec<Package> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let root = root();
    let raw = m["packages"].as_array().expect("packages");
    let dir_of = |p: &serde_json::Value| -> PathBuf {
        PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"))
            .parent()
            .expect("a manifest is in a directory")
            .to_owned()
    };
    let short = |dir: &Path| -> String {
        if dir == root {
            "kintsugi".to_owned()
        } else {
            dir.file_name()
                .expect("a crate directory")
                .to_string_lossy()
                .into_owned()
        }
    };
    let by_package: BTreeMap<String, String> = raw
        .iter()
        .map(|p| (p["name"].as_str().expect("name").to_owned(), short(&dir_of(p))))
        .collect();
    raw.iter()
        .map(|p| {
            let dir = dir_of(p);
            let lib = p["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .find(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "lib")))
                .map(|t| PathBuf::from(t["src_path"].as_str().expect("src_path")));
            let normal: Vec<&serde_json::Value> = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .collect();
            Package {
                name: short(&dir),
                dir,
                lib,
                deps: normal
                    .iter()
                    .filter_map(|d| by_package.get(d["name"].as_str().expect("name")).cloned())
                    .collect(),
                all_deps: normal
                    .iter()
                    .map(|d| d["name"].as_str().expect("name").to_owned())
                    .collect(),
            }
        })
        .collect()
}

/// Every `.rs` file of the workspace, outside `target/` and `.git/`.
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if p.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    walk(&p, out);
                }
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).to_string_lossy().into_owned()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

// ---- the rules, each a function of its inputs ----

/// Dependencies that do not point down: to a crate of the same or a higher
/// layer, or from or to a crate the layers do not list.
fn layer_violations(
    layers: &BTreeMap<String, u32>,
    deps: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in deps {
        let Some(&above) = layers.get(from) else {
            out.push(format!("crate {from} is in no layer of ARCHITECTURE.md"));
            continue;
        };
        for to in tos {
            match layers.get(to) {
                None => out.push(format!("crate {to} (a dependency of {from}) is in no layer")),
                Some(&below) if below >= above => out.push(format!(
                    "{from} (layer {above}) depends on {to} (layer {below}): dependencies point down"
                )),
                Some(_) => {}
            }
        }
    }
    out
}

/// Whether `source` holds an `unsafe` block, function, impl or trait
/// (outside comments and string literals).
fn has_unsafe(source: &str) -> bool {
    code_lines(source).any(|l| {
        let mut words = l
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty());
        words.any(|w| w == "unsafe") && !l.contains("unsafe_code") && !l.contains("unsafe_op_in_unsafe_fn")
    })
}

/// The lines of `source` with comments and string literals blanked
/// (line-wise: good enough for the words tidy looks for).
fn code_lines(source: &str) -> impl Iterator<Item = String> + '_ {
    source.lines().map(|l| {
        let mut out = String::with_capacity(l.len());
        let mut in_str = false;
        let mut chars = l.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                if c == '\\' {
                    chars.next();
                } else if c == '"' {
                    in_str = false;
                    out.push('"');
                }
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' {
                in_str = true;
            }
            out.push(c);
        }
        out
    })
}

/// Files with `unsafe` not listed as allowed.
fn unsafe_violations(files: &[(String, String)], allowed: &BTreeSet<String>) -> Vec<String> {
    files
        .iter()
        .filter(|(path, source)| !allowed.contains(path) && has_unsafe(source))
        .map(|(path, _)| format!("{path} has `unsafe`, and ARCHITECTURE.md's unsafe list does not name it"))
        .collect()
}

/// A library root's missing crate attributes.
fn attribute_violations(name: &str, lib_root: &str, source: &str) -> Vec<String> {
    let has = |attr: &str| code_lines(source).any(|l| l.replace(' ', "").contains(&format!("#![{attr}")));
    let mut out = Vec::new();
    if name != UNSAFE_CRATE && !has("forbid(unsafe_code)") {
        out.push(format!("{lib_root} lacks #![forbid(unsafe_code)]"));
    }
    if !has("warn(missing_docs)") && !has("deny(missing_docs)") {
        out.push(format!("{lib_root} lacks #![warn(missing_docs)]"));
    }
    out
}

/// `anyhow` in a library: a dependency of its package (the root package
/// is the binary's and is exempt), or named in its lib's root.
fn anyhow_violations(name: &str, deps: &BTreeSet<String>, lib_root: &str, source: &str) -> Vec<String> {
    let mut out = Vec::new();
    if name != "kintsugi" && deps.contains("anyhow") {
        out.push(format!("library crate {name} depends on anyhow: use thiserror"));
    }
    if code_lines(source).any(|l| l.contains("anyhow")) {
        out.push(format!("{lib_root} uses anyhow: only the binary does"));
    }
    out
}

/// Whether a file opens with a `//!` doc (blank lines aside).
fn has_module_doc(source: &str) -> bool {
    source
        .lines()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| l.trim_start().starts_with("//!"))
}

/// Function lengths in lines (`fn` line to its closing brace), outside a
/// file's `#[cfg(test)]` module: `(lines, name, first line)`.
fn function_lengths(source: &str) -> Vec<(usize, String, usize)> {
    let lines: Vec<String> = code_lines(source).collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod "))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for i in 0..end {
        let l = lines[i].trim_start();
        let l = l
            .strip_prefix("pub ")
            .or_else(|| l.strip_prefix("pub(crate) "))
            .unwrap_or(l);
        let l = l.strip_prefix("const ").unwrap_or(l);
        let l = l.strip_prefix("async ").unwrap_or(l);
        let Some(rest) = l.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let (mut depth, mut opened) = (0i64, false);
        for (j, line) in lines.iter().enumerate().take(end).skip(i) {
            for c in line.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if !opened && line.trim_end().ends_with(';') {
                break;
            }
            if opened && depth <= 0 {
                out.push((j - i + 1, name.clone(), i + 1));
                break;
            }
        }
    }
    out
}

// ---- the checks on this tree ----

#[test]
fn dependencies_point_down_the_layers() {
    let layers = layers(&architecture());
    let deps: BTreeMap<String, BTreeSet<String>> = packages().into_iter().map(|p| (p.name, p.deps)).collect();
    let bad = layer_violations(&layers, &deps);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn unsafe_lives_only_in_the_files_architecture_md_lists() {
    let doc = architecture();
    // Each line names one file first; what follows says why.
    let allowed: BTreeSet<String> = section(&doc, "unsafe")
        .iter()
        .filter_map(|l| quoted(l).into_iter().next())
        .collect();
    for path in &allowed {
        assert!(
            root().join(path).is_file(),
            "ARCHITECTURE.md lists {path} for unsafe; it does not exist"
        );
    }
    let files: Vec<(String, String)> = rust_files().iter().map(|p| (relative(p), read(p))).collect();
    let bad = unsafe_violations(&files, &allowed);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_library_forbids_unsafe_warns_on_missing_docs_and_does_without_anyhow() {
    let mut bad = Vec::new();
    let files = rust_files();
    for p in packages() {
        let Some(lib) = &p.lib else { continue };
        let source = read(lib);
        let lib_root = relative(lib);
        bad.extend(attribute_violations(&p.name, &lib_root, &source));
        bad.extend(anyhow_violations(&p.name, &p.all_deps, &lib_root, &source));
        // The crate's other files too, for anyhow (its dependencies are
        // judged once, above): the root package's are the binary's.
        if p.name != "kintsugi" {
            let src = p.dir.join("src");
            for f in files.iter().filter(|f| f.starts_with(&src) && *f != lib) {
                bad.extend(anyhow_violations(
                    &p.name,
                    &BTreeSet::new(),
                    &relative(f),
                    &read(f),
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_rust_file_has_a_module_doc() {
    let bad: Vec<String> = rust_files()
        .iter()
        .filter(|p| !has_module_doc(&read(p)))
        .map(|p| format!("{} has no //! doc saying what it is", relative(p)))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let bad: Vec<String> = rust_files()
        .iter()
        .filter_map(|p| {
            let n = read(p).lines().count();
            (n > FILE_LINES_MAX).then(|| format!("{} has {n} lines (at most {FILE_LINES_MAX})", relative(p)))
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// A report (run with `--nocapture` to read it): the longest non-test
/// functions, outside `tests/` directories.
#[test]
fn report_the_longest_functions() {
    let mut all: Vec<(usize, String)> = rust_files()
        .iter()
        .filter(|p| {
            !p.components()
                .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "examples")
        })
        .flat_map(|p| {
            let path = relative(p);
            function_lengths(&read(p))
                .into_iter()
                .map(move |(n, name, line)| (n, format!("{path}:{line} {name}")))
        })
        .collect();
    all.sort_by(|a, b| b.cmp(a));
    println!("the {REPORT_FUNCTIONS} longest non-test functions (lines):");
    for (n, f) in all.iter().take(REPORT_FUNCTIONS) {
        println!("{n:6}  {f}");
    }
}

// ---- each rule broken on purpose ----

#[test]
fn a_dependency_up_or_across_a_layer_or_outside_them_is_refused() {
    let layers: BTreeMap<String, u32> = [("fabric", 0), ("txn", 1), ("control-plane", 1), ("index", 2)]
        .into_iter()
        .map(|(n, l)| (n.to_owned(), l))
        .collect();
    let deps = |pairs: &[(&str, &str)]| -> BTreeMap<String, BTreeSet<String>> {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            m.entry((*a).to_owned()).or_default().insert((*b).to_owned());
        }
        m
    };
    assert!(layer_violations(&layers, &deps(&[("index", "txn"), ("txn", "fabric")])).is_empty());
    assert_eq!(
        layer_violations(&layers, &deps(&[("txn", "index")])).len(),
        1,
        "up"
    );
    assert_eq!(
        layer_violations(&layers, &deps(&[("txn", "control-plane")])).len(),
        1,
        "across"
    );
    assert_eq!(
        layer_violations(&layers, &deps(&[("memnode", "fabric")])).len(),
        1,
        "unlisted"
    );
}

#[test]
fn unsafe_outside_the_list_is_refused_and_words_in_comments_are_not_unsafe() {
    let allowed: BTreeSet<String> = ["fabric/src/memory.rs".to_owned()].into();
    let file = |p: &str, s: &str| (p.to_owned(), s.to_owned());
    assert!(unsafe_violations(&[file("fabric/src/memory.rs", "unsafe { f() }")], &allowed).is_empty());
    assert_eq!(
        unsafe_violations(&[file("txn/src/a.rs", "let x = unsafe { f() };")], &allowed).len(),
        1
    );
    assert_eq!(
        unsafe_violations(&[file("txn/src/a.rs", "unsafe fn f() {}")], &allowed).len(),
        1
    );
    assert!(unsafe_violations(
        &[file(
            "txn/src/a.rs",
            "#![forbid(unsafe_code)]\n// no unsafe here\nlet s = \"unsafe\";"
        )],
        &allowed
    )
    .is_empty());
}

#[test]
fn a_library_without_its_attributes_or_with_anyhow_is_refused() {
    let good = "//! x\n#![forbid(unsafe_code)]\n#![warn(missing_docs)]\n";
    assert!(attribute_violations("txn", "txn/src/lib.rs", good).is_empty());
    assert_eq!(
        attribute_violations("txn", "txn/src/lib.rs", "#![warn(missing_docs)]").len(),
        1
    );
    assert_eq!(
        attribute_violations("txn", "txn/src/lib.rs", "#![forbid(unsafe_code)]").len(),
        1
    );
    assert!(attribute_violations("fabric", "fabric/src/lib.rs", "#![warn(missing_docs)]").is_empty());
    let none = BTreeSet::new();
    let with: BTreeSet<String> = ["anyhow".to_owned()].into();
    assert!(anyhow_violations("txn", &none, "txn/src/lib.rs", good).is_empty());
    assert_eq!(anyhow_violations("txn", &with, "txn/src/lib.rs", good).len(), 1);
    assert!(anyhow_violations("kintsugi", &with, "src/lib.rs", good).is_empty());
    assert_eq!(
        anyhow_violations("txn", &none, "txn/src/lib.rs", "use anyhow::Result;").len(),
        1
    );
}

#[test]
fn a_file_without_a_module_doc_is_refused_and_lengths_are_measured() {
    assert!(has_module_doc("\n//! What this is.\nfn f() {}"));
    assert!(!has_module_doc("/// An item doc.\nfn f() {}"));
    assert!(!has_module_doc("#![allow(x)]\n//! Late."));
    let source = "//! x\nfn a() {\n    let s = \"}\";\n}\n\npub async fn b() -> u8 {\n    1\n}\n\
                  #[cfg(test)]\nmod tests {\n    fn t() {\n    }\n}\n";
    assert_eq!(
        function_lengths(source),
        vec![(3, "a".to_owned(), 2), (3, "b".to_owned(), 6)]
    );
}
