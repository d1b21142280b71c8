//! deploy/systemd: the units' command lines and example configs.

use super::*;

// systemd

/// A unit file as `(section, key, value)`.
pub(crate) fn unit_entries(text: &str) -> Vec<(String, String, String)> {
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
pub(crate) fn systemd_units_run_real_commands_with_their_example_configs() {
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
