//! The deploy assets (`deploy/systemd`, `deploy/compose`, `deploy/k8s`)
//! against the real binary and against each other:
//!
//! - every `kintsugi` command line in the units, the compose file, the
//!   manifests and the scripts names subcommands and flags that the
//!   binary's `--help` lists, and every daemon's command line, with the
//!   config file it is given, passes the binary's `--print-config`;
//! - every YAML file parses; every Kubernetes object has apiVersion, kind
//!   and a name, and its references resolve (kustomization resources,
//!   Secret and ConfigMap keys, selectors, headless Services, the
//!   ServiceMonitor, the PodDisruptionBudget);
//! - every config (example TOMLs, the compose configs, the TOMLs inside
//!   ConfigMaps and Secrets) parses, with keys that are the daemon's flags
//!   (the control plane's through its own `Settings` parser);
//! - health checks and probes ask `/healthz` on the port the daemon's
//!   metrics listener is given;
//! - placeholder tokens are marked as such, and every caller's token is one
//!   the control plane's config grants the role the caller needs.
//!
//! No network and no daemon: file reads and `kintsugi ... --help` /
//! `--print-config` only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use control_plane::config::{Role, Settings};
use serde_norway::Value;

const SYSTEMD: &str = "deploy/systemd";
const COMPOSE: &str = "deploy/compose";
const K8S: &str = "deploy/k8s";

/// Marks every placeholder secret, so that none passes for a real one.
const PLACEHOLDER: &str = "CHANGE-ME";

/// The daemons, as the subcommands that run them.
const DAEMONS: [&str; 3] = ["control", "memnode", "serve"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Files under `dir`, recursively, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

fn is_yaml(path: &Path) -> bool {
    let n = name_of(path);
    n.ends_with(".yaml") || n.ends_with(".yml")
}

// ---------------------------------------------------------------------------
// The binary's command-line surface, as `--help` prints it.

/// One (sub)command's `--help`.
#[derive(Clone, Debug, Default)]
struct Help {
    /// Long options and their aliases, each with whether it takes a value.
    long: BTreeMap<String, bool>,
    short: BTreeSet<char>,
    commands: BTreeSet<String>,
}

impl Help {
    fn parse(text: &str) -> Help {
        let mut help = Help::default();
        let mut section = "";
        for line in text.lines() {
            if !line.starts_with(' ') {
                section = match line.trim_end() {
                    "Options:" => "options",
                    "Commands:" => "commands",
                    _ => "",
                };
                continue;
            }
            let trimmed = line.trim_start();
            match section {
                "commands" => {
                    if let Some(word) = trimmed.split_whitespace().next() {
                        help.commands.insert(word.to_owned());
                    }
                }
                "options" if trimmed.starts_with('-') => {
                    let words: Vec<&str> = trimmed.split_whitespace().collect();
                    let mut takes = false;
                    for (i, word) in words.iter().enumerate() {
                        let word = word.trim_end_matches(',');
                        if let Some(long) = word.strip_prefix("--") {
                            takes = words.get(i + 1).is_some_and(|w| w.starts_with('<'));
                            help.long.insert(long.trim_end_matches("...").to_owned(), takes);
                            break;
                        } else if let Some(short) = word.strip_prefix('-') {
                            help.short.extend(short.trim_end_matches("...").chars());
                        }
                    }
                    // `[alias: --endpoint]`, `[aliases: --a, --b]`
                    if let Some(at) = trimmed.find("[alias") {
                        let tail = &trimmed[at..trimmed[at..].find(']').map_or(trimmed.len(), |e| at + e)];
                        for word in tail.split_whitespace() {
                            if let Some(alias) = word.trim_end_matches(',').strip_prefix("--") {
                                help.long.insert(alias.to_owned(), takes);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        help
    }
}

/// Runs the binary; caches every `--help`.
struct Cli {
    helps: HashMap<Vec<String>, Help>,
}

impl Cli {
    fn new() -> Cli {
        Cli {
            helps: HashMap::new(),
        }
    }

    fn command() -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kintsugi"));
        // The environment must not supply what the files do not.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("KINTSUGI_") {
                c.env_remove(&key);
            }
        }
        c.env_remove("RUST_LOG");
        c
    }

    fn help(&mut self, path: &[String]) -> Help {
        self.helps
            .entry(path.to_vec())
            .or_insert_with(|| {
                let out = Cli::command()
                    .args(path)
                    .arg("--help")
                    .output()
                    .expect("running kintsugi");
                assert!(
                    out.status.success(),
                    "`kintsugi {} --help` failed: {}",
                    path.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
                Help::parse(&String::from_utf8_lossy(&out.stdout))
            })
            .clone()
    }
}

#[test]
fn help_parsing_sees_the_real_surface() {
    // The checks below are only as good as this: a parser that found no
    // flags would find every flag "missing", one that found all would pass
    // anything.
    let mut cli = Cli::new();
    let top = cli.help(&[]);
    for sub in DAEMONS.iter().chain(&["ctl"]) {
        assert!(
            top.commands.contains(*sub),
            "`kintsugi --help` lists no {sub}: {top:?}"
        );
    }
    let memnode = cli.help(&["memnode".into()]);
    assert_eq!(memnode.long.get("listen"), Some(&true), "{memnode:?}");
    assert_eq!(memnode.long.get("help"), Some(&false), "{memnode:?}");
    assert!(memnode.short.contains(&'v'), "{memnode:?}");
    assert!(!memnode.long.contains_key("lisen"));
    let ctl = cli.help(&["ctl".into()]);
    assert!(
        ctl.commands.contains("init") && ctl.commands.contains("members"),
        "{ctl:?}"
    );
    assert_eq!(
        ctl.long.get("endpoint"),
        Some(&true),
        "the alias of --endpoints: {ctl:?}"
    );
    assert_eq!(ctl.long.get("json"), Some(&false), "{ctl:?}");
}

// ---------------------------------------------------------------------------
// `kintsugi` command lines in shell text.

/// A `kintsugi` command line found in an asset.
#[derive(Clone, Debug)]
struct Invocation {
    /// Where it was found.
    source: String,
    /// Subcommands, outermost first (`["ctl", "members", "add"]`).
    path: Vec<String>,
    /// Everything after `kintsugi`, as the shell would pass it (quotes
    /// removed, variables not expanded).
    args: Vec<String>,
}

impl Invocation {
    fn daemon(&self) -> Option<&str> {
        self.path
            .first()
            .map(String::as_str)
            .filter(|p| DAEMONS.contains(p))
    }

    /// The value of `--flag VALUE` or `--flag=VALUE`.
    fn value(&self, flag: &str) -> Option<String> {
        let long = format!("--{flag}");
        let mut args = self.args.iter();
        while let Some(a) = args.next() {
            if *a == long {
                return args.next().cloned();
            }
            if let Some(v) = a.strip_prefix(&format!("{long}=")) {
                return Some(v.to_owned());
            }
        }
        None
    }
}

/// Simple commands in shell text: continuation lines joined, comments
/// dropped, split at `&&`, `||`, `;`, `|` and around `$(`...`)`. Quotes
/// are removed from each word; quoted words with spaces come apart, which
/// only matters to arguments this test does not read.
fn simple_commands(text: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let line = line.replace("$(", " ( ");
        let mut current: Vec<String> = Vec::new();
        for raw in line.split_whitespace() {
            if raw.starts_with('#') {
                break;
            }
            if matches!(raw, "&&" | "||" | ";" | ";;" | "|" | "(" | ")" | "{" | "}") {
                out.push(std::mem::take(&mut current));
                continue;
            }
            let mut word = raw;
            let mut ends = false;
            while let Some(w) = word.strip_suffix(';').or_else(|| word.strip_suffix(')')) {
                word = w;
                ends = true;
            }
            let word = word.trim_matches(|c| c == '"' || c == '\'');
            if !word.is_empty() {
                current.push(word.to_owned());
            }
            if ends {
                out.push(std::mem::take(&mut current));
            }
        }
        out.push(current);
    }
    out.retain(|c| !c.is_empty());
    out
}

/// Words that may stand before a command name in a simple command.
fn is_prefix_word(word: &str) -> bool {
    matches!(
        word,
        "exec" | "if" | "then" | "do" | "while" | "until" | "else" | "elif" | "time" | "!"
    ) || (word.contains('=') && !word.starts_with('-'))
}

/// Every `kintsugi` command line in `text`, each checked against `--help`:
/// unknown subcommands and flags are pushed to `errors`.
fn invocations(source: &str, text: &str, cli: &mut Cli, errors: &mut Vec<String>) -> Vec<Invocation> {
    let mut found = Vec::new();
    for words in simple_commands(text) {
        let Some(start) = words
            .iter()
            .position(|w| w.rsplit('/').next() == Some("kintsugi"))
        else {
            continue;
        };
        // `cargo build --bin kintsugi` names the binary without running it.
        if !words[..start].iter().all(|w| is_prefix_word(w)) {
            continue;
        }
        let args = words[start + 1..].to_vec();
        let mut path: Vec<String> = Vec::new();
        let mut help = cli.help(&path);
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            let shown = |path: &[String]| format!("kintsugi {}", path.join(" ")).trim_end().to_owned();
            if arg.starts_with('>') || arg.starts_with('<') || arg.starts_with("2>") || arg.starts_with("1>")
            {
                break;
            }
            if arg == "--" {
                break;
            }
            if let Some(long) = arg.strip_prefix("--") {
                let (name, inline) = match long.split_once('=') {
                    Some((n, _)) => (n, true),
                    None => (long, false),
                };
                match help.long.get(name) {
                    None => errors.push(format!("{source}: `{}` has no --{name}", shown(&path))),
                    Some(true) if !inline => i += 1,
                    Some(_) => {}
                }
            } else if let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
                for c in shorts.chars() {
                    if !help.short.contains(&c) {
                        errors.push(format!("{source}: `{}` has no -{c}", shown(&path)));
                    }
                }
            } else if help.commands.contains(arg.as_str()) {
                path.push(arg.clone());
                help = cli.help(&path);
            } else if !help.commands.is_empty() {
                // Only leaf commands take positional arguments.
                errors.push(format!("{source}: `{}` has no subcommand {arg:?}", shown(&path)));
                break;
            }
            i += 1;
        }
        found.push(Invocation {
            source: source.to_owned(),
            path,
            args,
        });
    }
    found
}

#[test]
fn the_command_line_check_catches_mistakes() {
    let mut cli = Cli::new();
    let mut errors = Vec::new();
    let good = "set -e\nuntil s=$(kintsugi ctl --endpoints \"$a\" --timeout 5s --json status 2>/dev/null); do sleep 1; done\n\
                exec /usr/local/bin/kintsugi memnode --config /x.toml \\\n  --advertise \"${HOSTNAME}:7100\"\n\
                cargo build --bin kintsugi\n";
    let found = invocations("good", good, &mut cli, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let paths: Vec<Vec<String>> = found.iter().map(|i| i.path.clone()).collect();
    assert_eq!(
        paths,
        [
            vec!["ctl".to_owned(), "status".to_owned()],
            vec!["memnode".to_owned()]
        ]
    );
    assert_eq!(found[1].value("advertise").as_deref(), Some("${HOSTNAME}:7100"));

    for (bad, expected) in [
        ("kintsugi memnode --lisen 0.0.0.0:7100", "has no --lisen"),
        (
            "exec kintsugi control --config c.toml --metric-listen :9400",
            "has no --metric-listen",
        ),
        (
            "kintsugi ctl --endpoints a members ad 2 b:1",
            "has no subcommand \"ad\"",
        ),
        ("kintsugi contrl --config c.toml", "has no subcommand \"contrl\""),
        ("x=$(kintsugi ctl --jsn status)", "has no --jsn"),
        ("kintsugi serve -q", "has no -q"),
    ] {
        let mut errors = Vec::new();
        invocations("bad", bad, &mut cli, &mut errors);
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{bad:?} should fail with {expected:?}: {errors:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Configs.

/// Which daemon a config is for, by its file (or data key) name.
fn daemon_of_config(name: &str) -> Option<&'static str> {
    [
        ("control", "control"),
        ("memnode", "memnode"),
        ("gateway", "serve"),
    ]
    .into_iter()
    .find(|(prefix, _)| name.starts_with(prefix))
    .map(|(_, daemon)| daemon)
}

/// The tokens a control-plane config grants, by token.
type Grants = BTreeMap<String, Role>;

/// Checks one config of `daemon`; for the control plane, returns the tokens
/// it grants.
fn check_config(
    source: &str,
    daemon: &str,
    text: &str,
    cli: &mut Cli,
    errors: &mut Vec<String>,
) -> Option<Grants> {
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            errors.push(format!("{source}: not TOML: {e}"));
            return None;
        }
    };
    let help = cli.help(&[daemon.to_owned()]);
    let flag_keys = |table: &toml::Table, what: &str, errors: &mut Vec<String>| {
        for (key, value) in table {
            let flag = key.replace('_', "-");
            match help.long.get(&flag) {
                _ if matches!(flag.as_str(), "config" | "print-config" | "help") => errors.push(format!(
                    "{source}: {what}{key} is not something a config file sets"
                )),
                None => errors.push(format!(
                    "{source}: {what}{key}: `kintsugi {daemon}` has no --{flag}"
                )),
                Some(false) if !value.is_bool() => errors.push(format!(
                    "{source}: {what}{key} is a switch (--{flag}): true or false"
                )),
                Some(_) => {}
            }
        }
    };
    if daemon != "control" {
        flag_keys(&table, "", errors);
        return None;
    }
    let settings = match Settings::from_toml(text) {
        Ok(s) => s,
        Err(e) => {
            errors.push(format!("{source}: refused by the control plane's parser: {e}"));
            return None;
        }
    };
    if let Some(member) = table.get("member") {
        match member.as_table() {
            Some(m) => flag_keys(m, "[member].", errors),
            None => errors.push(format!("{source}: member is not a table")),
        }
    }
    let secret = table
        .get("cluster_secret")
        .and_then(toml::Value::as_str)
        .unwrap_or_default();
    if !secret.contains(PLACEHOLDER) {
        errors.push(format!(
            "{source}: cluster_secret is not marked {PLACEHOLDER}: a real secret in the repository?"
        ));
    }
    let mut grants = Grants::new();
    for t in &settings.tokens {
        if !t.token.contains(PLACEHOLDER) {
            errors.push(format!(
                "{source}: token {:?} is not marked {PLACEHOLDER}",
                t.name
            ));
        }
        grants.insert(t.token.clone(), t.role);
    }
    Some(grants)
}

/// Whether `role` lets a caller do what the holder of `what` (an env file or
/// Secret key named after its holder) must.
fn role_suffices(what: &str, role: Role) -> bool {
    if what.starts_with("admin") {
        role == Role::Admin
    } else if what.starts_with("memnode") {
        // Registering and renewing a memory node.
        matches!(role, Role::Operator | Role::Admin)
    } else {
        true
    }
}

fn check_token(source: &str, holder: &str, token: &str, grants: &Grants, errors: &mut Vec<String>) {
    if !token.contains(PLACEHOLDER) || token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        errors.push(format!(
            "{source}: token must be a placeholder marked {PLACEHOLDER}, at least 16 visible ASCII characters"
        ));
    }
    match grants.get(token) {
        None => errors.push(format!(
            "{source}: its token is not one the control plane's config grants"
        )),
        Some(role) if !role_suffices(holder, *role) => errors.push(format!(
            "{source}: its token's role {role:?} is too weak for {holder}"
        )),
        Some(_) => {}
    }
}

/// `KEY=VALUE` lines of an env file.
fn env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        .collect()
}

/// Shell and systemd variables replaced by a value any flag accepts, so
/// that a command line can be run with `--print-config`.
fn concrete(arg: &str) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(at) = rest.find(['$', '%']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        let skip = if rest[at..].starts_with('%') {
            tail.chars().next().map_or(0, char::len_utf8)
        } else if let Some(braced) = tail.strip_prefix('{') {
            braced.find('}').map_or(tail.len(), |e| e + 2)
        } else {
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len())
        };
        out.push('1');
        rest = &tail[skip..];
    }
    out.push_str(rest);
    out
}

/// Runs a daemon's command line as written, with `--config` pointing at
/// `config` and `--print-config` added: the binary's own verdict on the
/// pair (unknown keys, bad values, missing required settings).
fn print_config(inv: &Invocation, config: &Path, errors: &mut Vec<String>) {
    let mut args: Vec<String> = Vec::new();
    let mut it = inv.args.iter();
    while let Some(a) = it.next() {
        if a == "--config" {
            it.next();
            continue;
        }
        if a.starts_with('>') || a.starts_with("2>") {
            break;
        }
        args.push(concrete(a));
    }
    args.push("--config".into());
    args.push(config.display().to_string());
    args.push("--print-config".into());
    let out = Cli::command().args(&args).output().expect("running kintsugi");
    if !out.status.success() {
        errors.push(format!(
            "{}: `kintsugi {}` failed: {}",
            inv.source,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
}

/// The port of `HOST:PORT`.
fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit(':').next()?.parse().ok()
}

/// Where a daemon serves `/healthz`: `--metrics-listen`, else its config's
/// `metrics_listen` (`[member]`'s for the control plane).
fn metrics_port(inv: &Invocation, config: Option<&str>) -> Option<u16> {
    if let Some(v) = inv.value("metrics-listen") {
        return port_of(&v);
    }
    let table: toml::Table = config?.parse().ok()?;
    let table = match table.get("member") {
        Some(m) if inv.daemon() == Some("control") => m.as_table()?.clone(),
        _ => table,
    };
    port_of(table.get("metrics_listen")?.as_str()?)
}

// ---------------------------------------------------------------------------
// systemd

/// A unit file as `(section, key, value)`.
fn unit_entries(text: &str) -> Vec<(String, String, String)> {
    let joined = text.replace("\\\n", " ");
    let mut section = String::new();
    let mut out = Vec::new();
    for line in joined.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_owned();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    out
}

#[test]
fn systemd_units_run_real_commands_with_their_example_configs() {
    let dir = repo().join(SYSTEMD);
    let mut cli = Cli::new();
    let mut errors = Vec::new();
    let all = files(&dir);

    // The control plane's example first: the others' tokens are checked
    // against it.
    let mut grants = Grants::new();
    let mut configs: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in &all {
        let name = name_of(path);
        if !(name.ends_with(".toml") || name.ends_with(".toml.example")) {
            continue;
        }
        let Some(daemon) = daemon_of_config(&name) else {
            errors.push(format!(
                "{name}: a config for which daemon? (name it control*, memnode* or gateway*)"
            ));
            continue;
        };
        if let Some(g) = check_config(&name, daemon, &read(path), &mut cli, &mut errors) {
            grants.extend(g);
        }
        configs.insert(name, path.clone());
    }
    assert!(
        !grants.is_empty(),
        "no usable control-plane example config under {SYSTEMD}:\n{}",
        errors.join("\n")
    );
    for path in &all {
        let name = name_of(path);
        if name.ends_with(".env") || name.ends_with(".env.example") {
            if let Some(token) = env_file(&read(path)).get("KINTSUGI_TOKEN") {
                check_token(&name, &name, token, &grants, &mut errors);
            }
        }
    }

    let expected = [
        ("kintsugi-control@.service", "control"),
        ("kintsugi-memnode@.service", "memnode"),
        ("kintsugi-gateway.service", "serve"),
    ];
    let units: Vec<&PathBuf> = all.iter().filter(|p| name_of(p).ends_with(".service")).collect();
    assert_eq!(
        units.iter().map(|p| name_of(p)).collect::<BTreeSet<_>>(),
        expected
            .iter()
            .map(|(u, _)| u.to_string())
            .collect::<BTreeSet<_>>(),
        "the units under {SYSTEMD}"
    );
    for (unit, daemon) in expected {
        let entries = unit_entries(&read(&dir.join(unit)));
        let get = |section: &str, key: &str| -> Vec<&str> {
            entries
                .iter()
                .filter(|(s, k, _)| s == section && k == key)
                .map(|(_, _, v)| v.as_str())
                .collect()
        };
        let mut found = Vec::new();
        for (section, key, value) in &entries {
            if section == "Service" && key.starts_with("Exec") {
                let command = value.trim_start_matches(['-', '@', ':', '+', '!']);
                found.extend(invocations(
                    &format!("{unit} {key}"),
                    command,
                    &mut cli,
                    &mut errors,
                ));
            }
        }
        let runs: Vec<&Invocation> = found.iter().filter(|i| i.daemon() == Some(daemon)).collect();
        if runs.len() != 1 || get("Service", "ExecStart").len() != 1 {
            errors.push(format!(
                "{unit}: one ExecStart running `kintsugi {daemon}` expected, found {found:?}"
            ));
            continue;
        }
        let inv = runs[0];
        // The config it reads must be one of the examples beside it.
        match inv.value("config") {
            None => errors.push(format!("{unit}: runs `kintsugi {daemon}` without --config")),
            Some(config) => {
                let file = config.rsplit('/').next().unwrap_or_default();
                let example = [file.replace("%i", "1"), file.replace("-%i", "")]
                    .into_iter()
                    .map(|f| format!("{f}.example"))
                    .find(|f| configs.contains_key(f));
                match example {
                    None => errors.push(format!("{unit}: no example beside it for --config {config}")),
                    Some(example) => print_config(inv, &configs[&example], &mut errors),
                }
            }
        }
        for (section, key, value) in [
            ("Unit", "After", "network-online.target"),
            ("Unit", "Wants", "network-online.target"),
            ("Service", "Restart", "on-failure"),
            ("Service", "KillSignal", "SIGTERM"),
            ("Service", "NoNewPrivileges", "yes"),
            ("Service", "ProtectSystem", "strict"),
            ("Install", "WantedBy", "multi-user.target"),
        ] {
            if !get(section, key)
                .iter()
                .any(|v| v.split_whitespace().any(|w| w == value))
            {
                errors.push(format!("{unit}: [{section}] {key}={value} expected"));
            }
        }
        if get("Service", "User").is_empty() && get("Service", "DynamicUser") != ["yes"] {
            errors.push(format!("{unit}: runs as root (no User= or DynamicUser=yes)"));
        }
        if !get("Service", "EnvironmentFile")
            .iter()
            .any(|v| v.starts_with('-'))
        {
            errors.push(format!(
                "{unit}: an optional EnvironmentFile=- for secrets expected"
            ));
        }
        if daemon != "serve" && get("Service", "StateDirectory").is_empty() {
            errors.push(format!("{unit}: keeps state but has no StateDirectory="));
        }
        if daemon == "memnode" && get("Service", "LimitMEMLOCK").is_empty() {
            errors.push(format!("{unit}: RDMA registration needs LimitMEMLOCK="));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

// ---------------------------------------------------------------------------
// YAML

/// Every document of a YAML file, merge keys applied.
fn yaml_documents(path: &Path, errors: &mut Vec<String>) -> Vec<Value> {
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

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A command given as a YAML sequence or string, as shell text; the
/// script of `[sh, -c, SCRIPT]` on lines of its own, as the shell reads it.
fn command_text(v: &Value) -> Option<String> {
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
fn every_yaml_file_parses() {
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

// ---------------------------------------------------------------------------
// compose

#[test]
fn compose_file_wires_real_commands_configs_and_health_checks() {
    let dir = repo().join(COMPOSE);
    let mut cli = Cli::new();
    let mut errors = Vec::new();
    let docs = yaml_documents(&dir.join("compose.yaml"), &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    let services = docs[0]
        .get("services")
        .and_then(Value::as_mapping)
        .expect("compose.yaml: services");

    // Configs by file, each checked once; the control plane's tokens.
    let mut grants = Grants::new();
    for path in files(&dir) {
        let name = name_of(&path);
        if name.ends_with(".toml") || name.ends_with(".toml.example") {
            match daemon_of_config(&name) {
                None => errors.push(format!("{name}: a config for which daemon?")),
                Some(d) => grants
                    .extend(check_config(&name, d, &read(&path), &mut cli, &mut errors).unwrap_or_default()),
            }
        }
    }
    assert!(
        !grants.is_empty(),
        "no usable control-plane config under {COMPOSE}:\n{}",
        errors.join("\n")
    );

    let names: BTreeSet<String> = services
        .keys()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let mut daemons: BTreeMap<String, usize> = BTreeMap::new();
    let mut ctl: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut scripts = 0;
    // Each daemon's metrics listener, as `service:port`.
    let mut scraped: Vec<(String, String)> = Vec::new();
    for (name, service) in services {
        let name = name.as_str().expect("service name");
        let source = format!("compose.yaml: {name}");
        // Bind mounts: host files that must exist, by container path.
        let mut mounts: BTreeMap<String, PathBuf> = BTreeMap::new();
        for volume in service
            .get("volumes")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            let Some(spec) = volume.as_str() else { continue };
            let mut parts = spec.split(':');
            let (Some(host), Some(target)) = (parts.next(), parts.next()) else {
                continue;
            };
            if host.starts_with('.') || host.starts_with('/') {
                let path = dir.join(host);
                if !path.exists() {
                    errors.push(format!("{source}: mounts {host}, which does not exist"));
                }
                mounts.insert(target.to_owned(), path);
            } else if docs[0].get("volumes").is_none_or(|v| v.get(host).is_none()) {
                errors.push(format!("{source}: volume {host} is not declared"));
            }
        }
        let mut env = BTreeMap::new();
        for file in service
            .get("env_file")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            let file = file.as_str().expect("env_file entry");
            let path = dir.join(file);
            if !path.exists() {
                errors.push(format!("{source}: env_file {file} does not exist"));
                continue;
            }
            for (k, v) in env_file(&read(&path)) {
                env.insert(k, (file.to_owned(), v));
            }
        }
        if let Some(deps) = service.get("depends_on") {
            let deps: Vec<&str> = match deps {
                Value::Mapping(m) => m.keys().filter_map(Value::as_str).collect(),
                Value::Sequence(s) => s.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            for d in deps.iter().filter(|d| !names.contains(**d)) {
                errors.push(format!("{source}: depends on {d}, which is no service"));
            }
        }

        let command = service.get("command").and_then(command_text).unwrap_or_default();
        let mut found = invocations(&source, &command, &mut cli, &mut errors);
        // A script it runs, from a mount: its command lines count as its own.
        for word in command.split_whitespace() {
            if let Some(script) = mounts.get(word).filter(|_| word.ends_with(".sh")) {
                scripts += 1;
                found.extend(invocations(
                    &format!("{source} ({word})"),
                    &read(script),
                    &mut cli,
                    &mut errors,
                ));
            }
        }
        let mut role = None;
        for inv in &found {
            if inv.path.first().map(String::as_str) == Some("ctl") {
                ctl.insert(inv.path.clone());
                role = Some("admin");
            }
            let Some(daemon) = inv.daemon() else { continue };
            *daemons.entry(daemon.to_owned()).or_default() += 1;
            // A member's tokens are its config; the others bring one.
            role = match daemon {
                "memnode" => Some("memnode"),
                "serve" => Some("gateway"),
                _ => role,
            };
            let config = inv.value("config").map(|c| (mounts.get(&c).cloned(), c));
            let config_text = match &config {
                None => {
                    errors.push(format!("{source}: runs `kintsugi {daemon}` without --config"));
                    None
                }
                Some((None, c)) => {
                    errors.push(format!("{source}: --config {c} is not mounted from a file"));
                    None
                }
                Some((Some(host), _)) => {
                    if daemon_of_config(&name_of(host)) != Some(daemon) {
                        errors.push(format!("{source}: `kintsugi {daemon}` reads {}", host.display()));
                    }
                    print_config(inv, host, &mut errors);
                    Some(read(host))
                }
            };
            // The health check must ask the daemon's metrics listener.
            let port = metrics_port(inv, config_text.as_deref());
            if let Some(port) = port {
                scraped.push((daemon.to_owned(), format!("{name}:{port}")));
            }
            let test = service
                .get("healthcheck")
                .and_then(|h| h.get("test"))
                .and_then(command_text)
                .unwrap_or_default();
            let asked = test
                .split_whitespace()
                .find(|w| w.contains("/healthz"))
                .and_then(|url| url.split("/healthz").next())
                .and_then(port_of);
            match (port, asked) {
                (None, _) => errors.push(format!("{source}: `kintsugi {daemon}` has no metrics listener")),
                (_, None) => errors.push(format!("{source}: no healthcheck asking /healthz")),
                (p, a) if p != a => {
                    errors.push(format!("{source}: healthcheck asks port {a:?}, metrics on {p:?}"))
                }
                _ => {}
            }
        }
        if let Some(role) = role {
            match env.get("KINTSUGI_TOKEN") {
                Some((file, token)) => {
                    check_token(&format!("{source} ({file})"), role, token, &grants, &mut errors)
                }
                None => errors.push(format!("{source}: no KINTSUGI_TOKEN from an env_file")),
            }
        }
    }
    for (daemon, at_least) in [("control", 3), ("memnode", 2), ("serve", 1)] {
        let n = daemons.get(daemon).copied().unwrap_or(0);
        if n < at_least {
            errors.push(format!(
                "compose.yaml: {n} services run `kintsugi {daemon}`, expected {at_least} or more"
            ));
        }
    }
    if scripts == 0 {
        errors.push("compose.yaml: no service runs the script that forms the cluster".into());
    }
    for path in [["ctl", "init"].as_slice(), &["ctl", "members", "add"]] {
        if !ctl.contains(&path.iter().map(|s| s.to_string()).collect::<Vec<_>>()) {
            errors.push(format!(
                "compose.yaml: nothing runs `kintsugi {}`",
                path.join(" ")
            ));
        }
    }
    // Prometheus: the alert rules of deploy/monitoring, and a config with
    // that directory's job names (which the rules match) scraping every
    // daemon's metrics listener.
    let prometheus = services
        .get("prometheus")
        .expect("compose.yaml: a prometheus service");
    let mounts: BTreeMap<&str, &str> = prometheus
        .get("volumes")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|m| {
            let mut parts = m.split(':');
            Some((parts.nth(1)?, m.split(':').next()?))
        })
        .collect();
    if !mounts
        .values()
        .any(|host| *host == "../monitoring/alert-rules.yml")
    {
        errors.push("compose.yaml: prometheus does not mount ../monitoring/alert-rules.yml".into());
    }
    let jobs = |path: &Path, errors: &mut Vec<String>| -> BTreeMap<String, Vec<String>> {
        let docs = yaml_documents(path, errors);
        let mut jobs = BTreeMap::new();
        for job in docs
            .first()
            .and_then(|d| d.get("scrape_configs"))
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            let targets = job
                .get("static_configs")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
                .flat_map(|c| {
                    c.get("targets")
                        .and_then(Value::as_sequence)
                        .into_iter()
                        .flatten()
                })
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            jobs.insert(str_of(job, "job_name").unwrap_or_default().to_owned(), targets);
        }
        jobs
    };
    match mounts.get("/etc/prometheus/prometheus.yml") {
        None => errors.push("compose.yaml: prometheus has no config mounted".into()),
        Some(host) => {
            let config = dir.join(host);
            let ours = jobs(&config, &mut errors);
            let reference = jobs(&repo().join("deploy/monitoring/prometheus.yml"), &mut errors);
            if ours.keys().collect::<Vec<_>>() != reference.keys().collect::<Vec<_>>() {
                errors.push(format!(
                    "{host}: jobs {:?}, but deploy/monitoring/prometheus.yml (which the alert rules match) has {:?}",
                    ours.keys().collect::<Vec<_>>(),
                    reference.keys().collect::<Vec<_>>()
                ));
            }
            for (daemon, target) in &scraped {
                let job = match daemon.as_str() {
                    "serve" => "kintsugi-gateway".to_owned(),
                    d => format!("kintsugi-{d}"),
                };
                if !ours.get(&job).is_some_and(|t| t.contains(target)) {
                    errors.push(format!("{host}: job {job} does not scrape {target}"));
                }
            }
            let rules = yaml_documents(&config, &mut errors)
                .first()
                .and_then(|d| d.get("rule_files"))
                .and_then(Value::as_sequence)
                .cloned()
                .unwrap_or_default();
            for rule in rules.iter().filter_map(Value::as_str) {
                if !mounts.contains_key(format!("/etc/prometheus/{rule}").as_str()) {
                    errors.push(format!("{host}: rule file {rule} is not mounted beside it"));
                }
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

// ---------------------------------------------------------------------------
// Kubernetes

/// Whether every label of `selector` is among `labels`.
fn selects(selector: Option<&Value>, labels: Option<&Value>) -> bool {
    let (Some(Value::Mapping(selector)), Some(Value::Mapping(labels))) = (selector, labels) else {
        return false;
    };
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A pod volume's ConfigMap or Secret: kind, name, and the `(key, path)`
/// items it projects (all keys, by their names, when `None`).
type VolumeSource = (String, String, Option<Vec<(String, String)>>);

/// A ConfigMap's or Secret's entries.
struct Store {
    data: BTreeMap<String, String>,
}

#[test]
fn kubernetes_manifests_are_complete_and_consistent() {
    let dir = repo().join(K8S);
    let mut cli = Cli::new();
    let mut errors = Vec::new();

    // kustomization.yaml: its resources are exactly the other YAML files.
    let kustomization = yaml_documents(&dir.join("kustomization.yaml"), &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    let kustomization = &kustomization[0];
    assert_eq!(str_of(kustomization, "kind"), Some("Kustomization"));
    let listed: BTreeSet<String> = kustomization
        .get("resources")
        .and_then(Value::as_sequence)
        .expect("kustomization.yaml: resources")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let present: BTreeSet<String> = files(&dir)
        .iter()
        .filter(|p| is_yaml(p) && name_of(p) != "kustomization.yaml")
        .map(|p| {
            p.strip_prefix(&dir)
                .expect("under k8s")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        listed, present,
        "kustomization.yaml's resources against the YAML files beside it"
    );

    // Every object, by kind.
    let mut objects: Vec<(String, Value)> = Vec::new();
    for file in &listed {
        for doc in yaml_documents(&dir.join(file), &mut errors) {
            let name = doc
                .get("metadata")
                .and_then(|m| str_of(m, "name"))
                .unwrap_or_default();
            for (field, value) in [
                ("apiVersion", str_of(&doc, "apiVersion")),
                ("kind", str_of(&doc, "kind")),
                ("metadata.name", Some(name)),
            ] {
                if value.is_none_or(str::is_empty) {
                    errors.push(format!("{file}: a document without {field}"));
                }
            }
            objects.push((file.clone(), doc));
        }
    }
    let of_kind = |kind: &str| -> Vec<(&str, &Value)> {
        objects
            .iter()
            .filter(|(_, o)| str_of(o, "kind") == Some(kind))
            .map(|(f, o)| (f.as_str(), o))
            .collect()
    };
    let name = |o: &Value| {
        o.get("metadata")
            .and_then(|m| str_of(m, "name"))
            .unwrap_or_default()
            .to_owned()
    };

    // ConfigMaps and Secrets, the generated ones included.
    let mut stores: BTreeMap<(String, String), Store> = BTreeMap::new();
    for kind in ["ConfigMap", "Secret"] {
        for (_, o) in of_kind(kind) {
            let mut data = BTreeMap::new();
            for field in ["data", "stringData"] {
                for (k, v) in o.get(field).and_then(Value::as_mapping).into_iter().flatten() {
                    let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
                        continue;
                    };
                    data.insert(k.to_owned(), v.to_owned());
                }
            }
            stores.insert((kind.to_owned(), name(o)), Store { data });
        }
    }
    for generator in kustomization
        .get("configMapGenerator")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        let mut data = BTreeMap::new();
        for file in generator
            .get("files")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            let file = file.as_str().expect("generator file");
            let (key, path) = file
                .split_once('=')
                .unwrap_or((file.rsplit('/').next().unwrap_or(file), file));
            match fs::read_to_string(dir.join(path)) {
                Ok(text) => {
                    data.insert(key.to_owned(), text);
                }
                Err(e) => errors.push(format!("kustomization.yaml: generator file {path}: {e}")),
            }
        }
        stores.insert(
            (
                "ConfigMap".into(),
                str_of(generator, "name").unwrap_or_default().to_owned(),
            ),
            Store { data },
        );
    }

    // Configs inside them; the control plane's tokens.
    let mut grants = Grants::new();
    for ((kind, store), s) in &stores {
        for (key, text) in &s.data {
            if key.ends_with(".toml") {
                match daemon_of_config(key) {
                    None => errors.push(format!("{kind} {store}: {key} is a config for which daemon?")),
                    Some(d) => grants.extend(
                        check_config(&format!("{kind} {store}: {key}"), d, text, &mut cli, &mut errors)
                            .unwrap_or_default(),
                    ),
                }
            }
        }
    }
    assert!(
        !grants.is_empty(),
        "no usable control-plane config in a Secret under {K8S}:\n{}",
        errors.join("\n")
    );
    for ((kind, store), s) in &stores {
        if kind == "Secret" {
            for (key, value) in s.data.iter().filter(|(k, _)| k.ends_with("-token")) {
                check_token(
                    &format!("Secret {store}: {key}"),
                    key,
                    value,
                    &grants,
                    &mut errors,
                );
            }
        }
    }

    // Services, and what the pods of workloads need of them.
    let services = of_kind("Service");
    let monitors = of_kind("ServiceMonitor");
    for (file, m) in &monitors {
        if str_of(m, "apiVersion") != Some("monitoring.coreos.com/v1") {
            errors.push(format!(
                "{file}: ServiceMonitor {} is not monitoring.coreos.com/v1",
                name(m)
            ));
        }
    }
    let mut daemons: BTreeMap<String, usize> = BTreeMap::new();
    let mut ctl: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut workloads = 0;
    for kind in ["StatefulSet", "Deployment", "Job"] {
        for (file, w) in of_kind(kind) {
            workloads += 1;
            let source = format!("{file}: {kind} {}", name(w));
            let spec = w.get("spec").expect("workload spec");
            let template = spec.get("template").expect("pod template");
            let pod_labels = template.get("metadata").and_then(|m| m.get("labels"));
            if kind != "Job"
                && !selects(
                    spec.get("selector").and_then(|s| s.get("matchLabels")),
                    pod_labels,
                )
            {
                errors.push(format!("{source}: its selector does not select its own pods"));
            }
            let pod = template.get("spec").expect("pod spec");
            // Volumes: their ConfigMaps, Secrets and keys must exist.
            let mut volumes: BTreeMap<String, VolumeSource> = BTreeMap::new();
            for v in pod
                .get("volumes")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
            {
                let vname = str_of(v, "name").unwrap_or_default().to_owned();
                for (field, kind, name_field) in [
                    ("configMap", "ConfigMap", "name"),
                    ("secret", "Secret", "secretName"),
                ] {
                    let Some(src) = v.get(field) else { continue };
                    let store = str_of(src, name_field).unwrap_or_default().to_owned();
                    let items = src.get("items").and_then(Value::as_sequence).map(|items| {
                        items
                            .iter()
                            .map(|i| {
                                (
                                    str_of(i, "key").unwrap_or_default().to_owned(),
                                    str_of(i, "path").unwrap_or_default().to_owned(),
                                )
                            })
                            .collect::<Vec<_>>()
                    });
                    match stores.get(&(kind.to_owned(), store.clone())) {
                        None => errors.push(format!("{source}: volume {vname}: no {kind} {store}")),
                        Some(s) => {
                            for (key, _) in items.iter().flatten() {
                                if !s.data.contains_key(key) {
                                    errors.push(format!(
                                        "{source}: volume {vname}: {kind} {store} has no {key}"
                                    ));
                                }
                            }
                        }
                    }
                    volumes.insert(vname.clone(), (kind.to_owned(), store, items));
                }
            }
            let claims: BTreeSet<String> = spec
                .get("volumeClaimTemplates")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("metadata").and_then(|m| str_of(m, "name")))
                .map(str::to_owned)
                .collect();
            if kind == "StatefulSet" {
                let service = str_of(spec, "serviceName").unwrap_or_default();
                let headless = services.iter().find(|(_, s)| name(s) == service);
                match headless {
                    None => errors.push(format!("{source}: serviceName {service:?} is no Service")),
                    Some((_, s)) => {
                        let sspec = s.get("spec").expect("service spec");
                        if str_of(sspec, "clusterIP") != Some("None") {
                            errors.push(format!("{source}: its Service {service} is not headless"));
                        }
                        if !selects(sspec.get("selector"), pod_labels) {
                            errors.push(format!(
                                "{source}: its Service {service} does not select its pods"
                            ));
                        }
                    }
                }
                if claims.is_empty() {
                    errors.push(format!(
                        "{source}: keeps no volume of its own (volumeClaimTemplates)"
                    ));
                }
            }
            let containers = pod
                .get("containers")
                .and_then(Value::as_sequence)
                .expect("containers");
            for c in containers {
                let cname = str_of(c, "name").unwrap_or_default();
                let source = format!("{source} container {cname}");
                let mut text = String::new();
                for field in ["command", "args"] {
                    if let Some(t) = c.get(field).and_then(command_text) {
                        text.push_str(&t);
                        text.push(' ');
                    }
                }
                // Files it mounts, by their path in the container.
                let mut mounted: BTreeMap<String, String> = BTreeMap::new();
                for m in c
                    .get("volumeMounts")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                {
                    let vname = str_of(m, "name").unwrap_or_default();
                    let at = str_of(m, "mountPath").unwrap_or_default().trim_end_matches('/');
                    match volumes.get(vname) {
                        Some((kind, store, items)) => {
                            let s = &stores[&(kind.clone(), store.clone())];
                            let entries: Vec<(String, String)> = match items {
                                Some(items) => items.clone(),
                                None => s.data.keys().map(|k| (k.clone(), k.clone())).collect(),
                            };
                            for (key, path) in entries {
                                if let Some(content) = s.data.get(&key) {
                                    mounted.insert(format!("{at}/{path}"), content.clone());
                                }
                            }
                        }
                        None if claims.contains(vname) => {}
                        None if pod
                            .get("volumes")
                            .and_then(Value::as_sequence)
                            .is_some_and(|vs| vs.iter().any(|v| str_of(v, "name") == Some(vname))) => {}
                        None => errors.push(format!("{source}: mounts {vname}, which is no volume")),
                    }
                }
                for e in c.get("env").and_then(Value::as_sequence).into_iter().flatten() {
                    let Some(r) = e.get("valueFrom").and_then(|v| v.get("secretKeyRef")) else {
                        continue;
                    };
                    let (store, key) = (
                        str_of(r, "name").unwrap_or_default(),
                        str_of(r, "key").unwrap_or_default(),
                    );
                    if !stores
                        .get(&("Secret".into(), store.into()))
                        .is_some_and(|s| s.data.contains_key(key))
                    {
                        errors.push(format!(
                            "{source}: env {:?}: Secret {store} has no {key}",
                            str_of(e, "name")
                        ));
                    }
                }
                let mut found = invocations(&source, &text, &mut cli, &mut errors);
                for word in text.split_whitespace() {
                    if let Some(script) = mounted.get(word).filter(|_| word.ends_with(".sh")) {
                        found.extend(invocations(
                            &format!("{source} ({word})"),
                            script,
                            &mut cli,
                            &mut errors,
                        ));
                    }
                }
                let ports: BTreeMap<String, u16> = c
                    .get("ports")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| {
                        Some((
                            str_of(p, "name")?.to_owned(),
                            u16::try_from(p.get("containerPort")?.as_u64()?).ok()?,
                        ))
                    })
                    .collect();
                for inv in &found {
                    if inv.path.first().map(String::as_str) == Some("ctl") {
                        ctl.insert(inv.path.clone());
                    }
                    let Some(daemon) = inv.daemon() else { continue };
                    *daemons.entry(name(w)).or_default() += 1;
                    let config = inv.value("config");
                    let config_text = config.as_ref().and_then(|p| mounted.get(p));
                    match (&config, config_text) {
                        (None, _) => {
                            errors.push(format!("{source}: runs `kintsugi {daemon}` without --config"))
                        }
                        (Some(p), None) => errors.push(format!("{source}: --config {p} is not mounted")),
                        (Some(p), Some(text)) => {
                            if daemon_of_config(p.rsplit('/').next().unwrap_or_default()) != Some(daemon) {
                                errors.push(format!("{source}: `kintsugi {daemon}` reads {p}"));
                            }
                            let tmp = tempfile::NamedTempFile::new().expect("temp file");
                            fs::write(tmp.path(), text).expect("write temp config");
                            print_config(inv, tmp.path(), &mut errors);
                        }
                    }
                    let port = metrics_port(inv, config_text.map(String::as_str));
                    if port.is_none() || ports.get("metrics") != port.as_ref() {
                        errors.push(format!(
                            "{source}: container port `metrics` {:?}, the daemon's metrics listener {port:?}",
                            ports.get("metrics")
                        ));
                    }
                    let ready = c.get("readinessProbe").and_then(|p| p.get("httpGet"));
                    let probe_port = ready.and_then(|h| h.get("port"));
                    let probe_ok = ready.is_some_and(|h| str_of(h, "path") == Some("/healthz"))
                        && (probe_port.and_then(Value::as_str) == Some("metrics")
                            || probe_port.and_then(Value::as_u64) == port.map(u64::from));
                    if !probe_ok {
                        errors.push(format!(
                            "{source}: readinessProbe must GET /healthz on the metrics port"
                        ));
                    }
                    if c.get("livenessProbe").is_none() {
                        errors.push(format!("{source}: no livenessProbe"));
                    }
                    // Scraped: a Service selecting these pods exposes the
                    // metrics port, and a ServiceMonitor selects the Service.
                    let scraped = services.iter().any(|(_, s)| {
                        let sspec = s.get("spec");
                        selects(sspec.and_then(|s| s.get("selector")), pod_labels)
                            && sspec
                                .and_then(|s| s.get("ports"))
                                .and_then(Value::as_sequence)
                                .is_some_and(|ps| ps.iter().any(|p| str_of(p, "name") == Some("metrics")))
                            && monitors.iter().any(|(_, m)| {
                                let mspec = m.get("spec");
                                selects(
                                    mspec
                                        .and_then(|s| s.get("selector"))
                                        .and_then(|s| s.get("matchLabels")),
                                    s.get("metadata").and_then(|m| m.get("labels")),
                                ) && mspec
                                    .and_then(|s| s.get("endpoints"))
                                    .and_then(Value::as_sequence)
                                    .is_some_and(|es| es.iter().any(|e| str_of(e, "port") == Some("metrics")))
                            })
                    });
                    if !scraped {
                        errors.push(format!(
                            "{source}: no Service + ServiceMonitor scrapes its metrics port"
                        ));
                    }
                }
                // A job's callers need a token the control plane grants.
                if found
                    .iter()
                    .any(|i| i.path.first().map(String::as_str) == Some("ctl"))
                {
                    let token = c
                        .get("env")
                        .and_then(Value::as_sequence)
                        .into_iter()
                        .flatten()
                        .find(|e| str_of(e, "name") == Some("KINTSUGI_TOKEN"));
                    match token
                        .and_then(|e| e.get("valueFrom"))
                        .and_then(|v| v.get("secretKeyRef"))
                    {
                        Some(r) if str_of(r, "key") == Some("admin-token") => {}
                        _ => errors.push(format!(
                            "{source}: runs `kintsugi ctl` without the admin-token Secret key"
                        )),
                    }
                }
            }
        }
    }
    assert!(workloads > 0, "no workloads under {K8S}");
    let expect = |what: &str, ok: bool, errors: &mut Vec<String>| {
        if !ok {
            errors.push(format!("{K8S}: {what}"));
        }
    };
    let count = |n: &str| daemons.get(n).copied().unwrap_or(0);
    let statefulset = |n: &str| {
        of_kind("StatefulSet")
            .into_iter()
            .find(|(_, s)| name(s) == n)
            .map(|(_, s)| s)
    };
    expect(
        "StatefulSet kintsugi-control runs `kintsugi control`",
        count("kintsugi-control") == 1,
        &mut errors,
    );
    expect(
        "StatefulSet kintsugi-memnode runs `kintsugi memnode`",
        count("kintsugi-memnode") == 1,
        &mut errors,
    );
    expect(
        "a Deployment runs `kintsugi serve`",
        of_kind("Deployment").iter().any(|(_, d)| count(&name(d)) > 0),
        &mut errors,
    );
    expect(
        "three control-plane members",
        statefulset("kintsugi-control")
            .and_then(|s| s.get("spec"))
            .and_then(|s| s.get("replicas"))
            .and_then(Value::as_u64)
            == Some(3),
        &mut errors,
    );
    for path in [["ctl", "init"].as_slice(), &["ctl", "members", "add"]] {
        expect(
            &format!("a Job runs `kintsugi {}`", path.join(" ")),
            ctl.contains(&path.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            &mut errors,
        );
    }
    let control_pods = statefulset("kintsugi-control")
        .and_then(|s| s.get("spec"))
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"));
    expect(
        "a PodDisruptionBudget for the control-plane members",
        of_kind("PodDisruptionBudget").iter().any(|(_, p)| {
            selects(
                p.get("spec")
                    .and_then(|s| s.get("selector"))
                    .and_then(|s| s.get("matchLabels")),
                control_pods,
            )
        }),
        &mut errors,
    );
    expect("a Namespace", !of_kind("Namespace").is_empty(), &mut errors);
    expect("a ServiceMonitor", !monitors.is_empty(), &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
