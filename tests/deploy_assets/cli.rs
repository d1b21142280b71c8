//! The binary's command-line surface as `--help` prints it, and the
//! `kintsugi` command lines found in shell text, checked against it.

use super::*;

// The binary's command-line surface, as `--help` prints it.

/// One (sub)command's `--help`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Help {
    /// Long options and their aliases, each with whether it takes a value.
    pub(crate) long: BTreeMap<String, bool>,
    pub(crate) short: BTreeSet<char>,
    pub(crate) commands: BTreeSet<String>,
}

impl Help {
    pub(crate) fn parse(text: &str) -> Help {
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
pub(crate) struct Cli {
    pub(crate) helps: HashMap<Vec<String>, Help>,
}

impl Cli {
    pub(crate) fn new() -> Cli {
        Cli {
            helps: HashMap::new(),
        }
    }

    pub(crate) fn command() -> Command {
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

    pub(crate) fn help(&mut self, path: &[String]) -> Help {
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
pub(crate) fn help_parsing_sees_the_real_surface() {
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
pub(crate) struct Invocation {
    /// Where it was found.
    pub(crate) source: String,
    /// Subcommands, outermost first (`["ctl", "members", "add"]`).
    pub(crate) path: Vec<String>,
    /// Everything after `kintsugi`, as the shell would pass it (quotes
    /// removed, variables not expanded).
    pub(crate) args: Vec<String>,
}

impl Invocation {
    pub(crate) fn daemon(&self) -> Option<&str> {
        self.path
            .first()
            .map(String::as_str)
            .filter(|p| DAEMONS.contains(p))
    }

    /// The value of `--flag VALUE` or `--flag=VALUE`.
    pub(crate) fn value(&self, flag: &str) -> Option<String> {
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
pub(crate) fn simple_commands(text: &str) -> Vec<Vec<String>> {
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
pub(crate) fn is_prefix_word(word: &str) -> bool {
    matches!(
        word,
        "exec" | "if" | "then" | "do" | "while" | "until" | "else" | "elif" | "time" | "!"
    ) || (word.contains('=') && !word.starts_with('-'))
}

/// Every `kintsugi` command line in `text`, each checked against `--help`:
/// unknown subcommands and flags are pushed to `errors`.
pub(crate) fn invocations(
    source: &str,
    text: &str,
    cli: &mut Cli,
    errors: &mut Vec<String>,
) -> Vec<Invocation> {
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
pub(crate) fn the_command_line_check_catches_mistakes() {
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
