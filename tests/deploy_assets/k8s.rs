//! deploy/k8s: objects, references, selectors, probes and monitoring.

use super::*;

// Kubernetes

/// Whether every label of `selector` is among `labels`.
pub(crate) fn selects(selector: Option<&Value>, labels: Option<&Value>) -> bool {
    let (Some(Value::Mapping(selector)), Some(Value::Mapping(labels))) = (selector, labels) else {
        return false;
    };
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A pod volume's ConfigMap or Secret: kind, name, and the `(key, path)`
/// items it projects (all keys, by their names, when `None`).
pub(crate) type VolumeSource = (String, String, Option<Vec<(String, String)>>);

/// A ConfigMap's or Secret's entries.
pub(crate) struct Store {
    pub(crate) data: BTreeMap<String, String>,
}

#[test]
pub(crate) fn kubernetes_manifests_are_complete_and_consistent() {
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
