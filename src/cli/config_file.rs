//! One TOML file per daemon, read before the command line.
//!
//! `kintsugi memnode --config FILE` and `kintsugi serve --config FILE`: FILE
//! holds the daemon's flags by their long names (`metrics_listen` or
//! `metrics-listen`), each with the value the flag would take: a string or
//! number, `true` for a switch, an array for a flag that repeats.
//! `kintsugi control --config FILE`: FILE is the member's settings
//! (control_plane::config) and its `[member]` table holds the flags.
//!
//! The file's flags are put on the command line ahead of the ones typed; a
//! flag typed there replaces the file's (a repeated one, such as `--region`,
//! replaces the file's whole list). A key that is not a flag of the daemon is
//! an error naming the file and the key. `--print-config` prints the effective flags
//! (the file's, the command line's and the defaults) as TOML and exits,
//! with tokens and secrets redacted.

use std::ffi::OsString;
use std::path::Path;

use anyhow::Context;
use clap::{ArgMatches, CommandFactory};

use control_plane::config::read_bounded;

use super::Cli;

/// The subcommands that read a config file this way.
pub const DAEMONS: &[&str] = &["control", "memnode", "serve"];

/// Largest config file read, in bytes: as control_plane::config's.
const CONFIG_BYTES_MAX: u64 = control_plane::config::CONFIG_BYTES_MAX;

/// The table of flags of `control`'s settings file.
const MEMBER_TABLE: &str = "member";

/// Flags a file cannot set: the file itself, and what only makes sense typed.
const NOT_IN_FILE: &[&str] = &["config", "print-config", "help", "version"];

/// What `--print-config` shows in place of a secret.
const REDACTED: &str = "<redacted>";

/// `argv` with the flags of the daemon's `--config FILE` put right after the
/// subcommand; unchanged for other commands or without `--config`.
pub fn expand(argv: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    let Some(at) = daemon_position(&argv) else {
        return Ok(argv);
    };
    let daemon = argv[at].to_string_lossy().into_owned();
    let Some(file) = config_path(&argv[at + 1..]) else {
        return Ok(argv);
    };
    let table = read_table(Path::new(&file))?;
    let flags = if daemon == "control" {
        match table.get(MEMBER_TABLE) {
            None => toml::Table::new(),
            Some(toml::Value::Table(t)) => t.clone(),
            Some(_) => anyhow::bail!(
                "{}: `{MEMBER_TABLE}` must be a table ([{MEMBER_TABLE}])",
                file.to_string_lossy()
            ),
        }
    } else {
        table
    };
    // A flag typed on the command line replaces the file's, lists included
    // (clap would add a typed `--control` to the file's list).
    let typed: Vec<String> = argv[at + 1..]
        .iter()
        .filter_map(|a| {
            a.to_str()?
                .strip_prefix("--")
                .map(|f| f.split('=').next().unwrap_or(f).to_owned())
        })
        .collect();
    let flags: toml::Table = flags
        .into_iter()
        .filter(|(key, _)| !typed.contains(&key.replace('_', "-")))
        .collect();
    let injected = to_args(&daemon, &flags).with_context(|| {
        let place = if daemon == "control" {
            format!(" [{MEMBER_TABLE}]")
        } else {
            String::new()
        };
        format!("{}{place}", file.to_string_lossy())
    })?;
    let mut out = argv[..=at].to_vec();
    out.extend(injected);
    out.extend_from_slice(&argv[at + 1..]);
    Ok(out)
}

/// Where the daemon's subcommand sits: the first word that is not a flag.
fn daemon_position(argv: &[OsString]) -> Option<usize> {
    let at = argv
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))?
        + 1;
    DAEMONS
        .contains(&argv[at].to_string_lossy().as_ref())
        .then_some(at)
}

/// The value of `--config FILE` or `--config=FILE`.
fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let text = a.to_string_lossy();
        if text == "--config" {
            return it.next().cloned();
        }
        if let Some(v) = text.strip_prefix("--config=") {
            return Some(v.into());
        }
    }
    None
}

fn read_table(path: &Path) -> anyhow::Result<toml::Table> {
    let shown = path.display();
    let bytes =
        read_bounded(path, CONFIG_BYTES_MAX).with_context(|| format!("cannot read --config {shown}"))?;
    let text = String::from_utf8(bytes).with_context(|| format!("--config {shown} is not UTF-8"))?;
    text.parse::<toml::Table>()
        .with_context(|| format!("--config {shown} is not TOML"))
}

/// The daemon's own command, for its flags.
fn daemon_command(daemon: &str) -> anyhow::Result<clap::Command> {
    Cli::command()
        .find_subcommand(daemon)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no subcommand {daemon}"))
}

/// `flags` as command-line arguments of `daemon`.
fn to_args(daemon: &str, flags: &toml::Table) -> anyhow::Result<Vec<OsString>> {
    let command = daemon_command(daemon)?;
    let mut out = Vec::new();
    for (key, value) in flags {
        let long = key.replace('_', "-");
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && !NOT_IN_FILE.contains(&long.as_str()));
        let Some(arg) = arg else {
            let known: Vec<String> = command
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long())
                .filter(|l| !NOT_IN_FILE.contains(l))
                .map(|l| l.replace('-', "_"))
                .collect();
            anyhow::bail!(
                "unknown key `{key}`: `kintsugi {daemon}` has no --{long} (keys: {})",
                known.join(", ")
            );
        };
        let flag = format!("--{long}");
        let takes_value = arg.get_action().takes_values();
        let scalar = |v: &toml::Value| -> anyhow::Result<String> {
            match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                toml::Value::Boolean(b) => Ok(b.to_string()),
                other => anyhow::bail!("`{key}` = {other}: expected a string, number or boolean"),
            }
        };
        match value {
            toml::Value::Boolean(on) if !takes_value => {
                if *on {
                    out.push(flag.into());
                }
            }
            _ if !takes_value => anyhow::bail!("`{key}` is a switch: write `{key} = true` or leave it out"),
            toml::Value::Array(items) => {
                for item in items {
                    out.push(flag.clone().into());
                    out.push(scalar(item)?.into());
                }
            }
            v => {
                out.push(flag.into());
                out.push(scalar(v)?.into());
            }
        }
    }
    Ok(out)
}

/// With `--print-config`, the effective configuration of the daemon
/// `matches` runs, as TOML; `None` for anything else.
pub fn printed(matches: &ArgMatches) -> anyhow::Result<Option<String>> {
    let Some((daemon, sub)) = matches.subcommand() else {
        return Ok(None);
    };
    if !DAEMONS.contains(&daemon)
        || !sub
            .try_get_one::<bool>("print_config")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false)
    {
        return Ok(None);
    }
    let command = daemon_command(daemon)?;
    let mut flags = toml::Table::new();
    for arg in command.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
            continue;
        };
        if NOT_IN_FILE.contains(&long) || arg.is_hide_set() {
            continue;
        }
        let key = long.replace('-', "_");
        let secret = key.contains("token") || key.contains("secret");
        if !arg.get_action().takes_values() {
            if let Ok(Some(&on)) = sub.try_get_one::<bool>(id) {
                flags.insert(key, toml::Value::Boolean(on));
            }
            continue;
        }
        let Ok(Some(raw)) = sub.try_get_raw(id) else {
            continue;
        };
        let values: Vec<toml::Value> = raw
            .map(|v| {
                let text = if secret {
                    REDACTED.to_owned()
                } else {
                    v.to_string_lossy().into_owned()
                };
                toml::Value::String(text)
            })
            .collect();
        let repeats = matches!(arg.get_action(), clap::ArgAction::Append);
        let value = match (repeats, values.len()) {
            (false, 1) => values
                .into_iter()
                .next()
                .unwrap_or(toml::Value::String(String::new())),
            _ => toml::Value::Array(values),
        };
        flags.insert(key, value);
    }
    let text = if daemon == "control" {
        let config = sub
            .try_get_raw("config")
            .ok()
            .flatten()
            .and_then(|mut v| v.next())
            .map(std::path::PathBuf::from);
        let settings = super::control::settings(config.as_ref())?;
        let mut whole = toml::Table::try_from(&settings).context("encoding the settings")?;
        whole.insert("cluster_secret".into(), toml::Value::String(REDACTED.into()));
        if let Some(toml::Value::Array(tokens)) = whole.get_mut("tokens") {
            for t in tokens.iter_mut().filter_map(toml::Value::as_table_mut) {
                t.insert("token".into(), toml::Value::String(REDACTED.into()));
            }
        }
        whole.insert(MEMBER_TABLE.into(), toml::Value::Table(flags));
        whole
    } else {
        flags
    };
    Ok(Some(
        toml::to_string(&text).context("encoding the configuration")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn with_file(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.toml");
        std::fs::write(&path, text).unwrap();
        let shown = path.to_string_lossy().into_owned();
        (dir, shown)
    }

    #[test]
    fn a_files_flags_go_before_the_typed_ones() {
        let (_dir, path) = with_file(
            "listen = \"127.0.0.1:7100\"\nmetrics_listen = \"127.0.0.1:9100\"\nregion = [\"1:4096\", \"2:8192\"]\n",
        );
        let out = expand(argv(&[
            "kintsugi",
            "-v",
            "memnode",
            "--config",
            &path,
            "--listen",
            "0.0.0.0:1",
        ]))
        .unwrap();
        let words: Vec<String> = out.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        assert_eq!(
            words[..9],
            [
                "kintsugi",
                "-v",
                "memnode",
                "--metrics-listen",
                "127.0.0.1:9100",
                "--region",
                "1:4096",
                "--region",
                "2:8192"
            ]
        );
        assert_eq!(
            words[9..],
            ["--config", &path, "--listen", "0.0.0.0:1"],
            "the typed --listen only"
        );
        let out = expand(argv(&["kintsugi", "memnode", "--config", &path])).unwrap();
        assert_eq!(
            out[2..4],
            [OsString::from("--listen"), OsString::from("127.0.0.1:7100")]
        );
        // Typed, a flag replaces the file's: a list as a whole.
        let out = expand(argv(&[
            "kintsugi",
            "memnode",
            "--config",
            &path,
            "--region=3:4096",
            "--listen",
            "x",
        ]))
        .unwrap();
        let words: Vec<String> = out.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        assert_eq!(
            words,
            [
                "kintsugi",
                "memnode",
                "--metrics-listen",
                "127.0.0.1:9100",
                "--config",
                &path,
                "--region=3:4096",
                "--listen",
                "x"
            ]
        );
    }

    #[test]
    fn unknown_keys_and_wrong_shapes_are_errors_naming_the_key() {
        let (_dir, path) = with_file("listn = \"127.0.0.1:7100\"\n");
        let err = format!(
            "{:#}",
            expand(argv(&["kintsugi", "memnode", "--config", &path])).unwrap_err()
        );
        assert!(
            err.contains("unknown key `listn`") && err.contains("listen"),
            "{err}"
        );
        let (_dir, path) = with_file("[member]\nid = 1\nbogus = true\n");
        let err = format!(
            "{:#}",
            expand(argv(&["kintsugi", "control", "--config", &path])).unwrap_err()
        );
        assert!(err.contains("[member]") && err.contains("`bogus`"), "{err}");
        let (_dir, path) = with_file("listen = { a = 1 }\n");
        assert!(expand(argv(&["kintsugi", "memnode", "--config", &path])).is_err());
    }

    #[test]
    fn other_commands_and_no_config_are_left_alone() {
        let words = argv(&["kintsugi", "ctl", "--config", "/nonexistent", "status"]);
        assert_eq!(expand(words.clone()).unwrap(), words);
        let words = argv(&["kintsugi", "memnode", "--listen", "127.0.0.1:0"]);
        assert_eq!(expand(words.clone()).unwrap(), words);
    }
}
