//! deploy/compose: commands, configs, mounts and health checks.

use super::*;

// compose

#[test]
pub(crate) fn compose_file_wires_real_commands_configs_and_health_checks() {
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
