//! The daemons' configs: parsed as each daemon reads them, run through
//! `--print-config`, and the tokens callers carry checked against the
//! roles the control plane grants.

use super::*;

// Configs.

/// Which daemon a config is for, by its file (or data key) name.
pub(crate) fn daemon_of_config(name: &str) -> Option<&'static str> {
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
pub(crate) type Grants = BTreeMap<String, Role>;

/// Checks one config of `daemon`; for the control plane, returns the tokens
/// it grants.
pub(crate) fn check_config(
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
pub(crate) fn role_suffices(what: &str, role: Role) -> bool {
    if what.starts_with("admin") {
        role == Role::Admin
    } else if what.starts_with("memnode") {
        // Registering and renewing a memory node.
        matches!(role, Role::Operator | Role::Admin)
    } else {
        true
    }
}

pub(crate) fn check_token(
    source: &str,
    holder: &str,
    token: &str,
    grants: &Grants,
    errors: &mut Vec<String>,
) {
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
pub(crate) fn env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        .collect()
}

/// Shell and systemd variables replaced by a value any flag accepts, so
/// that a command line can be run with `--print-config`.
pub(crate) fn concrete(arg: &str) -> String {
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
pub(crate) fn print_config(inv: &Invocation, config: &Path, errors: &mut Vec<String>) {
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
pub(crate) fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit(':').next()?.parse().ok()
}

/// Where a daemon serves `/healthz`: `--metrics-listen`, else its config's
/// `metrics_listen` (`[member]`'s for the control plane).
pub(crate) fn metrics_port(inv: &Invocation, config: Option<&str>) -> Option<u16> {
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
