//! The shipped recording rules (`deploy/prometheus/davinci-rules.yml`) and Grafana
//! dashboard (`deploy/grafana/davinci-dashboard.json`) in a real Prometheus scraping a live
//! exporter while two clients work: every panel's query, its variables substituted as
//! Grafana does, has data, and so has every name the rules record, with npu-exporter's and
//! dcgm-exporter's labels and units.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use davinci_tests::mockd::{Mockd, TestClient};

use super::super::Exporter;
use super::{one_at_a_time, prometheus_or_skip, sample_value, Prometheus};

/// A file of the repository, by its path from the root.
fn repo(rel: &str) -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).join(rel)
}

/// Every target of the dashboard's panels (rows' nested panels included): (panel title,
/// query).
fn panel_queries(panels: &serde_json::Value, out: &mut Vec<(String, String)>) {
    for p in panels.as_array().into_iter().flatten() {
        let title = p["title"].as_str().unwrap_or("").to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title:?}: a target without expr: {t}"));
            out.push((title.clone(), expr.to_string()));
        }
        if p["type"] == "row" || p["targets"].is_null() {
            assert!(
                p["type"] == "row",
                "panel {title:?} ({}) has no queries",
                p["type"]
            );
        } else {
            assert_eq!(
                p["datasource"]["uid"], "${datasource}",
                "panel {title:?} does not use the datasource variable"
            );
        }
        panel_queries(&p["panels"], out);
    }
}

/// `expr` as Grafana sends it with single values selected for `vars`, and
/// `$__rate_interval` at 15 s (what Grafana gives a 1 s scrape interval at most).
fn substitute(expr: &str, vars: &[(&str, &str)]) -> String {
    let mut e = expr.replace("$__rate_interval", "15s");
    for (k, v) in vars {
        e = e
            .replace(&format!("${{{k}}}"), v)
            .replace(&format!("${k}"), v);
    }
    assert!(!e.contains('$'), "a variable the test does not know: {e}");
    e
}

/// The names the rules file records, in order.
fn recorded_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- record:"))
        .map(|n| n.trim().to_string())
        .collect()
}

/// Runs promtool (next to `prometheus`) with `args`; `None` if there is none.
fn promtool(prometheus: &Path, args: &[&str]) -> Option<String> {
    let promtool = prometheus.with_file_name("promtool");
    if !promtool.is_file() {
        eprintln!("no promtool next to {}: not run", prometheus.display());
        return None;
    }
    let out = Command::new(&promtool)
        .args(args)
        .output()
        .expect("run promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {said}");
    Some(said)
}

/// The one value of `q`, waiting until it has one.
fn one_value(prom: &mut Prometheus, q: &str, until: Instant) -> f64 {
    let r = prom.wait_for(q, until);
    assert_eq!(r.len(), 1, "{q}: {r:?}");
    sample_value(&r[0])
}

#[test]
fn dashboard_queries_and_mapped_names_have_data() {
    let Some(binary) = prometheus_or_skip() else {
        return;
    };
    let rules = repo("deploy/prometheus/davinci-rules.yml");
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let names = recorded_names(&rules_text);
    for want in [
        "machine_npu_nums",
        "npu_chip_info_utilization",
        "npu_chip_info_temperature",
        "npu_chip_info_power",
        "npu_chip_info_hbm_used_memory",
        "npu_chip_info_hbm_total_memory",
        "npu_chip_info_health_status",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} is not recorded");
    }
    // The rules are valid, and their unit tests (exact values and labels on synthetic
    // series) pass.
    let rules_arg = rules.display().to_string();
    let tests_arg = repo("deploy/prometheus/davinci-rules.test.yml")
        .display()
        .to_string();
    promtool(&binary, &["check", "rules", &rules_arg]);
    if let Some(said) = promtool(&binary, &["test", "rules", &tests_arg]) {
        assert!(said.contains("SUCCESS"), "{said}");
    }
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("deploy/grafana/davinci-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .expect("templating variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "instance", "device"]);
    assert!(dash["id"].is_null(), "an id would clash on import");
    let mut queries = Vec::new();
    panel_queries(&dash["panels"], &mut queries);
    assert!(queries.len() >= 20, "{queries:?}");

    let _one = one_at_a_time();
    let d = Mockd::start(&[
        "--devices",
        "1",
        "--memory",
        "64M",
        "--share-mode",
        "shared",
    ])
    .unwrap();
    // Two clients at work (FILL + ADD + COPY rounds until stdin closes).
    let clients: Vec<TestClient> = (0..2)
        .map(|_| TestClient::start(&d.path(0), &["work", "--until-eof", "--mem", "1048576"]))
        .collect();
    for c in &clients {
        c.expect("ready");
    }
    let dir = d.dir().display().to_string();
    let ex = Exporter::start(&["--socket-dir", &dir, "--client-series"]);
    let t0 = Instant::now();
    let mut prom = Prometheus::start_with_rules(&binary, ex.addr, Some(&rules));
    let until = t0 + Duration::from_secs(60);

    // The variables' values, as their label_values queries find them.
    let info = prom.wait_for("davinci_device_info", until);
    assert_eq!(info.len(), 1, "{info:?}");
    let label = |k: &str| info[0]["metric"][k].as_str().unwrap_or("").to_string();
    let (instance, device, uuid, model) = (
        label("instance"),
        label("device"),
        label("uuid"),
        label("model"),
    );
    let chip = label("chip_name");
    assert_eq!(device, "0");
    assert_eq!(uuid.len(), 36, "{info:?}");
    assert!(!model.is_empty(), "{info:?}");

    // Every davinci series of the device has its UUID and model.
    let all = "{__name__=~\"davinci_(device|client)_.+\"}";
    let with_id =
        format!("{{__name__=~\"davinci_(device|client)_.+\",uuid=\"{uuid}\",model=\"{model}\"}}");
    let q = format!("count({all}) - count({with_id})");
    assert_eq!(one_value(&mut prom, &q, until), 0.0, "series without them");
    let n = one_value(&mut prom, &format!("count({with_id})"), until);
    assert!(n > 40.0, "{n} series");

    // Every panel's query has data.
    let vars = [("instance", instance.as_str()), ("device", device.as_str())];
    for (title, expr) in &queries {
        let q = substitute(expr, &vars);
        eprintln!("panel {title:?}: {q}");
        prom.wait_for(&q, until);
    }
    // Some of it says what the clients do: two clients of one tenant (same user, no
    // container); the engines busy.
    let tenants = queries
        .iter()
        .find(|(t, _)| t == "Clients per tenant")
        .map(|(_, q)| substitute(q, &vars))
        .expect("a clients-per-tenant panel");
    assert_eq!(one_value(&mut prom, &tenants, until), 2.0);
    let util = queries
        .iter()
        .find(|(t, _)| t == "Utilization")
        .map(|(_, q)| substitute(q, &vars))
        .expect("a utilization panel");
    while one_value(&mut prom, &util, until) <= 0.0 {
        assert!(Instant::now() < until, "the engines never busy: {util}");
        std::thread::sleep(Duration::from_millis(250));
    }

    // Every recorded name has data, under the other exporters' labels and units.
    for n in &names {
        prom.wait_for(n, until);
    }
    let model_name = if chip.is_empty() { &model } else { &chip };
    let host = instance.rsplit_once(':').unwrap().0;
    let npu = format!("id=\"0\",vdie_id=\"{uuid}\",model_name=\"{model_name}\"");
    let dcgm = format!(
        "gpu=\"0\",UUID=\"{uuid}\",device=\"davinci0\",modelName=\"{model_name}\",Hostname=\"{host}\""
    );
    let q = format!("npu_chip_info_hbm_total_memory{{{npu}}}");
    assert_eq!(one_value(&mut prom, &q, until), 64.0, "MB");
    let q = format!("npu_chip_info_health_status{{{npu}}}");
    assert_eq!(one_value(&mut prom, &q, until), 1.0, "healthy");
    assert_eq!(one_value(&mut prom, "machine_npu_nums", until), 1.0);
    let q = format!("DCGM_FI_DEV_FB_USED{{{dcgm}}} + DCGM_FI_DEV_FB_FREE{{{dcgm}}}");
    assert_eq!(one_value(&mut prom, &q, until), 64.0, "MiB");
    for q in [
        format!("npu_chip_info_temperature{{{npu}}}"),
        format!("npu_chip_info_power{{{npu}}}"),
        format!("DCGM_FI_DEV_GPU_TEMP{{{dcgm}}}"),
        format!("DCGM_FI_DEV_POWER_USAGE{{{dcgm}}}"),
        format!("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{dcgm}}}"),
    ] {
        let v = one_value(&mut prom, &q, until);
        assert!(v > 0.0, "{q}: {v}");
    }
    let q = format!("DCGM_FI_DEV_GPU_UTIL{{{dcgm}}}");
    let v = one_value(&mut prom, &q, until);
    assert!((0.0..=100.0).contains(&v), "{q}: {v} is not a percentage");
    eprintln!("dashboard test took {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    drop(prom);
    for c in clients {
        assert_eq!(c.release(), 0, "a client failed");
    }
}
